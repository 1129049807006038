//! gatehouse proxy: the only way out of a worker sandbox.
//!
//! ```text
//! sandbox ─► identity socket ─► CONNECT host:443 ─► TLS (leaf minted by `ca`)
//!   ─► request head ─► rule book (pure) ─► deny: 403 JSON + audit record
//!                                     └─► allow: body check ─► strip client auth
//!        ─► inject credential (`credentials`) ─► audit record ─► `upstream` (verified TLS)
//!        ◄─ response: auth headers stripped, secrets redacted (`redact`) ─► audit completion
//! ```
//!
//! The identity of a request is the unix socket it arrived on (`server`),
//! created from the config or through the `admin` socket. Decisions are pure
//! functions over data; this crate's I/O lives in `server`, `upstream`,
//! `credentials`, `ca` and `admin`.

#![forbid(unsafe_code)]

pub mod body;
pub mod ca;
pub mod credentials;
pub mod redact;
pub mod server;
pub mod upstream;
