//! `[model]` in router.toml: where the router's model is and how it is
//! called. Off by default (no table: the rules-only judge and the template
//! replies). There is no key here, and no key may be added: the router
//! reaches the model through its own proxy identity (rule set `model-api`),
//! and the proxy injects the key.
//!
//! ```toml
//! [model]
//! socket = "/run/gatehouse/router-model.sock"  # the router's identity with rule set model-api
//! base_url = "https://api.openai.com/v1"
//! model = "gpt-4o-mini"
//! judge = true          # team rules' text judged by the model (default false)
//! writer = true         # ack/result/answer texts drafted by the model (default false)
//! timeout_ms = 20000    # one attempt
//! retries = 2           # after the first attempt, on 429, 5xx, no answer
//! backoff_ms = 500      # doubled per retry; a Retry-After replaces it
//! max_backoff_ms = 10000  # a longer Retry-After gives up
//! concurrency = 4       # calls in flight at once
//! batch_max = 32        # candidates judged in one call
//! batch_window_ms = 10000  # the longest a candidate waits for company (0: never)
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The `[model]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ModelFile {
    socket: PathBuf,
    base_url: String,
    model: String,
    #[serde(default)]
    judge: bool,
    #[serde(default)]
    writer: bool,
    #[serde(default = "default_timeout")]
    timeout_ms: u64,
    #[serde(default = "default_retries")]
    retries: u32,
    #[serde(default = "default_backoff")]
    backoff_ms: u64,
    #[serde(default = "default_max_backoff")]
    max_backoff_ms: u64,
    #[serde(default = "default_concurrency")]
    concurrency: usize,
    #[serde(default = "default_batch_max")]
    batch_max: usize,
    #[serde(default = "default_batch_window")]
    batch_window_ms: u64,
}

fn default_timeout() -> u64 {
    20_000
}
fn default_retries() -> u32 {
    2
}
fn default_backoff() -> u64 {
    500
}
fn default_max_backoff() -> u64 {
    10_000
}
fn default_concurrency() -> usize {
    4
}
fn default_batch_max() -> usize {
    32
}
fn default_batch_window() -> u64 {
    10_000
}

/// The model, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelConfig {
    /// The router's proxy identity whose rule set is `model-api`.
    pub socket: PathBuf,
    /// The API's host (reached as `CONNECT host:443` through the proxy).
    pub host: String,
    /// The path of chat completions: the base URL's path + `/chat/completions`.
    pub completions_path: String,
    pub model: String,
    pub judge: bool,
    pub writer: bool,
    pub timeout: Duration,
    pub retry: RetryPolicy,
    pub concurrency: usize,
    pub batch_max: usize,
    /// The longest a candidate waits for company before it is judged
    /// ([`super::window`]); zero: never waits.
    pub batch_window: Duration,
}

/// When and how long to wait before another attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts after the first.
    pub retries: u32,
    pub backoff: Duration,
    pub max_backoff: Duration,
}

/// `(key, expected)` of the first invalid value.
pub(crate) type Invalid = (String, String);

impl ModelFile {
    /// Validates the table; `path` resolves the socket against the file's directory.
    pub(crate) fn validate(
        self,
        path: impl Fn(&str, PathBuf) -> Result<PathBuf, Invalid>,
    ) -> Result<ModelConfig, Invalid> {
        let invalid = |key: &str, expected: &str| (format!("model.{key}"), expected.to_owned());
        let (host, prefix) = split_base_url(&self.base_url).ok_or_else(|| {
            invalid(
                "base_url",
                "https://host[/path] (no port, user, query or fragment: the proxy connects to port 443)",
            )
        })?;
        if self.model.trim().is_empty() || self.model.chars().any(char::is_control) {
            return Err(invalid("model", "a model name"));
        }
        if self.timeout_ms == 0 || self.timeout_ms > 600_000 {
            return Err(invalid("timeout_ms", "milliseconds between 1 and 600000"));
        }
        if self.retries > 10 {
            return Err(invalid("retries", "at most 10"));
        }
        if self.backoff_ms == 0 || self.max_backoff_ms < self.backoff_ms {
            return Err(invalid(
                "backoff_ms",
                "at least 1, and max_backoff_ms at least backoff_ms",
            ));
        }
        if self.concurrency == 0 || self.concurrency > 64 {
            return Err(invalid("concurrency", "between 1 and 64"));
        }
        if self.batch_max == 0 || self.batch_max > 256 {
            return Err(invalid("batch_max", "between 1 and 256"));
        }
        if self.batch_window_ms > 60_000 {
            return Err(invalid(
                "batch_window_ms",
                "milliseconds between 0 (never wait) and 60000",
            ));
        }
        Ok(ModelConfig {
            socket: path("model.socket", self.socket)?,
            completions_path: format!("{prefix}/chat/completions"),
            host,
            model: self.model,
            judge: self.judge,
            writer: self.writer,
            timeout: Duration::from_millis(self.timeout_ms),
            retry: RetryPolicy {
                retries: self.retries,
                backoff: Duration::from_millis(self.backoff_ms),
                max_backoff: Duration::from_millis(self.max_backoff_ms),
            },
            concurrency: self.concurrency,
            batch_max: self.batch_max,
            batch_window: Duration::from_millis(self.batch_window_ms),
        })
    }
}

/// `https://host/v1/` → `("host", "/v1")`. Pure.
fn split_base_url(url: &str) -> Option<(String, String)> {
    let rest = url.strip_prefix("https://")?;
    let (host, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    let path = path.trim_end_matches('/');
    let path_ok = path
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.'))
        && !path.split('/').any(|seg| seg == ".." || seg == ".")
        && !path.contains("//");
    (host_ok && path_ok).then(|| (host.to_ascii_lowercase(), path.to_owned()))
}

/// A relative socket path is taken from the config file's directory.
pub(crate) fn resolve(base: &Path, p: PathBuf) -> PathBuf {
    base.join(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(extra: &str) -> Result<ModelConfig, Invalid> {
        let text = format!(
            "socket = \"m.sock\"\nbase_url = \"https://api.openai.com/v1\"\nmodel = \"gpt\"\n{extra}"
        );
        let f: ModelFile = toml::from_str(&text).map_err(|e| ("parse".into(), e.to_string()))?;
        f.validate(|_, p| Ok(resolve(Path::new("/etc/g"), p)))
    }

    #[test]
    fn defaults_leave_judge_and_writer_off() {
        let c = file("").unwrap();
        assert_eq!(c.host, "api.openai.com");
        assert_eq!(c.completions_path, "/v1/chat/completions");
        assert_eq!(c.socket, PathBuf::from("/etc/g/m.sock"));
        assert!(!c.judge && !c.writer);
        assert_eq!(c.retry.retries, 2);
        assert_eq!(c.concurrency, 4);
        assert_eq!(c.batch_window, Duration::from_secs(10));
        assert_eq!(
            file("batch_window_ms = 0").unwrap().batch_window,
            Duration::ZERO
        );
    }

    #[test]
    fn a_key_in_the_config_is_refused() {
        for key in [
            "api_key = \"sk-x\"",
            "key_file = \"/k\"",
            "authorization = \"x\"",
        ] {
            let e = file(key).unwrap_err();
            assert!(e.1.contains("unknown field"), "{key}: {e:?}");
        }
    }

    #[test]
    fn bad_values_are_refused_by_key() {
        let cases = [
            ("timeout_ms = 0", "model.timeout_ms"),
            ("retries = 11", "model.retries"),
            ("backoff_ms = 0", "model.backoff_ms"),
            ("backoff_ms = 100\nmax_backoff_ms = 10", "model.backoff_ms"),
            ("concurrency = 0", "model.concurrency"),
            ("batch_max = 0", "model.batch_max"),
            ("batch_window_ms = 60001", "model.batch_window_ms"),
        ];
        for (extra, key) in cases {
            assert_eq!(file(extra).unwrap_err().0, key, "{extra}");
        }
    }

    #[test]
    fn base_urls() {
        let ok = [
            ("https://api.openai.com/v1", ("api.openai.com", "/v1")),
            ("https://API.example.com/", ("api.example.com", "")),
            ("https://h.example/openai/v1/", ("h.example", "/openai/v1")),
        ];
        for (url, (h, p)) in ok {
            assert_eq!(split_base_url(url), Some((h.into(), p.into())), "{url}");
        }
        for bad in [
            "http://api.openai.com/v1",
            "https://api.openai.com:8443/v1",
            "https://user@api.openai.com/v1",
            "https://api.openai.com/v1?x=1",
            "https://api.openai.com/v1#f",
            "https://api.openai.com/../v1",
            "https://api.openai.com//v1",
            "https:///v1",
            "api.openai.com",
        ] {
            assert_eq!(split_base_url(bad), None, "{bad}");
        }
    }
}
