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
//! The pure half, used by the server for every request:
//! `RequestHead` → [`rules::RuleBook::check`] (canonical path via [`path`],
//! rule sets and identity variables) → [`rules::Decision`]; for allowed
//! requests with a body check, [`graphql::check`] or
//! [`receive_pack::parse_commands`] + [`receive_pack::check`] before the
//! body is forwarded. [`config`] turns the TOML config into runtime types and
//! [`audit`] appends hash-chained JSONL records.
//!
//! The I/O half: the identity of a request is the unix socket it arrived on
//! (`server`), created from the config or through the `admin` socket;
//! `upstream`, `credentials`, `ca` and `redact` serve it.
//!
//! ```text
//! pure decisions
//!   rules          rule sets → RuleBook::check(head, rule sets, variables) → Decision
//!                  (rules/parse: the file format; rules/book: extends, examples;
//!                  rules/decide: the decision)
//!   path           canonical paths, path templates and their variables
//!   connect_target a CONNECT's target → splice, intercept or refuse
//!   graphql        a GraphQL document against a rule's allowlist
//!   json           one meaning per JSON body: no duplicate key, bounded depth and keys
//!   receive_pack   a push's ref updates against a ref policy; git's report-status
//!   config         the TOML config → Config, one validator per section
//!   audit          hash-chained JSONL records and their verification
//!   redact         finding and redacting held secrets in bytes
//! I/O
//!   service        Config → a running proxy
//!   admin          the admin socket: create, list and revoke identities
//!   server         one unix socket per identity, and the request path:
//!     connect        outer HTTP/1.1: CONNECT spliced, intercepted or refused
//!     framing        the request-framing guard in front of hyper
//!     client_socket  a client's unix socket, registered for reads only
//!     idle, deadline the idle clock and the header-read timeout, one moving
//!                    deadline per connection
//!     forward        one request: head::check ─► policy ─► inspect ─► message
//!                    ─► credential ─► upstream ─► respond (the I/O shell)
//!     head, headers, inspect, message, records, answers
//!                    its pure steps: head checks, what headers cross, body
//!                    verdicts, message and audit records, the proxy's own answers
//!     policy         the rule book as the server asks it (Grant, BodyChecker)
//!     audit_writer   audit lines written on the request path, synced in batches
//!   credentials    the registry and the Authorization header; one module per
//!                  kind: static_token, feishu_app, github_app
//!   upstream       verified TLS to the real hosts (and test overrides); lane:
//!                  each client connection's upstream connection, parked idle
//!   ca             the gatehouse CA and the leaves it mints
//!   body           body adapters: prefixed, counting, redacting
//! ```
#![forbid(unsafe_code)]

pub mod admin;
pub mod audit;
pub mod body;
pub mod ca;
pub mod config;
pub mod connect_target;
pub mod credentials;
pub mod graphql;
pub mod json;
pub mod limits;
pub mod metrics;
pub mod path;
pub mod receive_pack;
pub mod redact;
pub mod rules;
pub mod server;
pub mod service;
pub mod upstream;
