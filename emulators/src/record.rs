//! What the emulators received, for tests to inspect.
//!
//! Every request is recorded as it was seen on the wire (after TLS): method,
//! host, path, query, all headers including `Authorization` (proving which
//! credential a proxy injected is the point), the body up to
//! [`BODY_RECORD_LIMIT`] bytes, the status answered, and for calls that create
//! a comment or message the id the emulator returned.

use std::sync::Mutex;

/// How many body bytes a record keeps; the rest is counted, not kept.
pub const BODY_RECORD_LIMIT: usize = 64 * 1024;

/// How many records an emulator keeps; older ones are dropped first, so a
/// long-running emulator (demo, benchmark) does not grow without bound.
pub const MAX_RECORDS: usize = 100_000;

/// One request as the emulator received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// `GET`, `POST`, …
    pub method: String,
    /// The `Host` header without the port, lower-cased, if any.
    pub host: Option<String>,
    /// The path, exactly as received (still percent-encoded).
    pub path: String,
    /// The raw query string, if any.
    pub query: Option<String>,
    /// Every header in arrival order, names lower-cased, values lossily UTF-8.
    pub headers: Vec<(String, String)>,
    /// The first [`BODY_RECORD_LIMIT`] bytes of the body as received (for
    /// git requests: still gzip-compressed if the client sent it so, and
    /// filled in once the body has streamed through).
    pub body: Vec<u8>,
    /// Whether the body was longer than what [`RecordedRequest::body`] holds.
    pub body_truncated: bool,
    /// The HTTP status the emulator answered.
    pub status: u16,
    /// For a call that created a comment, review, pull request or message:
    /// the id the emulator returned.
    pub created_id: Option<String>,
    /// When the request's head arrived, Unix milliseconds.
    pub at_ms: u64,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// All values of header `name` (case-insensitive).
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The `Authorization` header, if any.
    pub fn authorization(&self) -> Option<&str> {
        self.header("authorization")
    }

    /// The recorded body as text (lossy).
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// The shared, append-only request log of one emulator.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    log: Mutex<Log>,
}

#[derive(Debug, Default)]
struct Log {
    requests: std::collections::VecDeque<RecordedRequest>,
    /// How many records were dropped (cleared or beyond [`MAX_RECORDS`]),
    /// so indices stay stable.
    cleared: usize,
}

impl Log {
    fn push(&mut self, request: RecordedRequest) -> usize {
        if self.requests.len() == MAX_RECORDS {
            self.requests.pop_front();
            self.cleared += 1;
        }
        self.requests.push_back(request);
        self.cleared + self.requests.len() - 1
    }
}

impl Recorder {
    pub(crate) fn push(&self, request: RecordedRequest) {
        trace(&request);
        lock(&self.log).push(request);
    }

    /// Push a record that will be completed later (streamed git bodies);
    /// returns its index for [`Recorder::update`].
    pub(crate) fn push_pending(&self, request: RecordedRequest) -> usize {
        lock(&self.log).push(request)
    }

    /// Complete a pending record; a no-op if it was cleared meanwhile.
    pub(crate) fn update(&self, index: usize, change: impl FnOnce(&mut RecordedRequest)) {
        let mut log = lock(&self.log);
        let Some(position) = index.checked_sub(log.cleared) else {
            return;
        };
        if let Some(record) = log.requests.get_mut(position) {
            let answered = record.status != 0;
            change(record);
            if !answered && record.status != 0 {
                trace(record);
            }
        }
    }

    pub(crate) fn snapshot(&self) -> Vec<RecordedRequest> {
        lock(&self.log).requests.iter().cloned().collect()
    }

    pub(crate) fn clear(&self) {
        let mut log = lock(&self.log);
        log.cleared += log.requests.len();
        log.requests.clear();
    }
}

/// One log line per answered request, without headers or body (they may
/// hold credentials): the binary prints these for demos and scripts.
fn trace(request: &RecordedRequest) {
    tracing::info!(
        method = %request.method,
        host = request.host.as_deref().unwrap_or("-"),
        path = %request.path,
        status = request.status,
        created_id = request.created_id.as_deref().unwrap_or("-"),
        "request"
    );
}

/// Lock a mutex, recovering the data if a handler panicked while holding it:
/// the emulators' state stays usable for the assertions that follow.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Split a request head into the parts a record keeps.
pub(crate) fn record_head(parts: &http::request::Parts) -> RecordedRequest {
    RecordedRequest {
        method: parts.method.as_str().to_owned(),
        host: request_host(parts),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().map(str::to_owned),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: Vec::new(),
        body_truncated: false,
        status: 0,
        created_id: None,
        at_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    }
}

/// The request's host name without port, lower-cased: from `Host`, else from
/// an absolute-form URI.
pub(crate) fn request_host(parts: &http::request::Parts) -> Option<String> {
    let raw = parts
        .headers
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| parts.uri.authority().map(|a| a.as_str().to_owned()))?;
    Some(strip_port(&raw).to_ascii_lowercase())
}

/// `host:port` → `host`, `[::1]:443` → `::1`.
pub(crate) fn strip_port(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            host
        }
        _ => authority,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_records_survive_clear_without_misplacing_updates() {
        let recorder = Recorder::default();
        let blank = || record_head(&http::Request::new(()).into_parts().0);
        let first = recorder.push_pending(blank());
        recorder.clear();
        let second = recorder.push_pending(blank());
        recorder.update(first, |r| r.status = 500);
        recorder.update(second, |r| r.status = 200);
        let records = recorder.snapshot();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].status, 200);
    }

    #[test]
    fn keeps_only_the_newest_records() {
        let recorder = Recorder::default();
        let blank = || record_head(&http::Request::new(()).into_parts().0);
        let first = recorder.push_pending(blank());
        for _ in 0..MAX_RECORDS {
            recorder.push(blank());
        }
        recorder.update(first, |r| r.status = 500);
        let records = recorder.snapshot();
        assert_eq!(records.len(), MAX_RECORDS);
        assert!(records.iter().all(|r| r.status == 0));
        let last = recorder.push_pending(blank());
        recorder.update(last, |r| r.status = 201);
        assert_eq!(recorder.snapshot().last().map(|r| r.status), Some(201));
    }

    #[test]
    fn strip_port_handles_names_ipv4_and_ipv6() {
        for (input, expected) in [
            ("api.github.com", "api.github.com"),
            ("api.github.com:8443", "api.github.com"),
            ("127.0.0.1:1", "127.0.0.1"),
            ("[::1]:443", "::1"),
            ("[::1]", "::1"),
            ("::1", "::1"),
        ] {
            assert_eq!(strip_port(input), expected, "{input}");
        }
    }
}
