//! The completion line of a forwarded request: written once its answer
//! has been passed on (or has failed), with what was learnt on the way.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use http::Response;

use super::answers::{redact_text, upstream_failed};
use super::records::now;
use super::Proxy;
use crate::audit::{CompletionRecord, Record};
use crate::body::ProxyBody;

/// The completion line of one forwarded request.
pub(super) struct Completion {
    pub(super) proxy: Arc<Proxy>,
    pub(super) request_id: String,
    /// [`crate::metrics::identity_kind`] of the identity.
    pub(super) identity_kind: &'static str,
    pub(super) started: Instant,
    pub(super) sent: Arc<AtomicU64>,
    /// Said in the line when nothing went wrong on the way back (why a
    /// refused token was not retried).
    pub(super) note: Option<String>,
}

impl Completion {
    pub(super) fn record(
        &self,
        status: u16,
        received: u64,
        mut message_id: Option<String>,
        error: Option<String>,
    ) {
        crate::metrics::completed(self.identity_kind, status, self.started.elapsed());
        let has_message_id = message_id.is_some();
        let mut error = error.or_else(|| self.note.clone());
        // Both can carry what the upstream said (a message id from its
        // answer, a host from its redirect): no held secret is written.
        if message_id.is_some() || error.is_some() {
            let secrets = self.proxy.credentials.held_secrets();
            for text in [&mut message_id, &mut error].into_iter().flatten() {
                if secrets.occur_in(text.as_bytes()) {
                    *text = redact_text(&secrets, text);
                }
            }
        }
        let record = Record::Completion(CompletionRecord {
            time: now(),
            request_id: self.request_id.clone(),
            status,
            bytes_sent: self.sent.load(Ordering::Relaxed),
            bytes_received: received,
            duration_ms: self.started.elapsed().as_millis() as u64,
            message_id,
            error,
            truncated: Default::default(),
        });
        // A created message's id is written and synced at once (the
        // reconciliation of messages matches on it); other completions go
        // out with the next line written (one write for both).
        let recorded = if has_message_id {
            self.proxy.audit.record_synced_soon(record)
        } else {
            self.proxy.audit.record_later(record)
        };
        if recorded.is_err() {
            tracing::error!(request_id = %self.request_id, "audit completion record lost");
        }
    }

    /// Records that the answer could not be read and says so (502).
    pub(super) fn unreadable(&self) -> Response<ProxyBody> {
        self.refuse(
            "response unreadable",
            "the upstream answer could not be read",
        )
    }

    /// Records why the answer is not passed on and says so (502).
    pub(super) fn refuse(&self, recorded: &str, answered: &str) -> Response<ProxyBody> {
        self.record(502, 0, None, Some(recorded.into()));
        upstream_failed(&self.proxy.credentials.held_secrets(), answered)
    }
}
