//! Local emulators of GitHub, Feishu and an OpenAI-compatible model API over TLS on loopback, for tests,
//! benchmarks and the demo.
//!
//! ```text
//! client (curl, git, gh, the proxy) ──TLS──► server (hyper, one thread + runtime per emulator)
//!     │                                        │ dispatch on Host / path
//!     │                                        ├─► REST + GraphQL ─► in-memory model (pure handlers)
//!     │                                        ├─► git smart HTTP ─► `git http-backend` on a bare repo (streamed)
//!     │                                        ├─► Feishu open API ─► tokens + messages
//!     │                                        └─► chat completions ─► scripted answers, latency, faults
//!     └── trusts the emulator's own test CA (generated in memory at start)
//! ```
//!
//! Every request is recorded ([`RecordedRequest`]) with its headers,
//! including `Authorization`, so tests can prove which credential a proxy
//! injected. Only configured tokens are accepted. Handlers are plain
//! functions over the model; I/O (sockets, the git child process, the clock)
//! stays at the edges.
#![forbid(unsafe_code)]

pub mod ca;
pub mod feishu;
pub mod github;
pub mod model;
pub mod record;
mod server;
mod time;
mod util;

pub use ca::{CaError, TestCa};
pub use feishu::{
    chats::FeishuChat,
    events::{EventDelivery, EventFaults, EventTarget},
    limits::ChatLimit,
    FeishuApp, FeishuEmulator, FeishuError, FeishuHandle, FeishuMessage, FeishuOptions,
};
pub use github::{
    rsa_public_key_der, user_id, webhook_signature, Annotation, AnswerFault, Comment, CommentKind,
    GithubAppSpec, GithubEmulator, GithubError, GithubHandle, GithubOptions, GithubToken,
    MintedToken, RateBudgets, RateLimit, RepoSpec, WebhookDelivery, WebhookFaults, WebhookTarget,
    GIT_USER,
};
pub use model::{
    Fault as ModelFault, ModelEmulator, ModelError, ModelHandle, ModelOptions, Reply as ModelReply,
    Script as ModelScript,
};
pub use record::RecordedRequest;
pub use server::ServeError;
