//! How a gatehouse process writes its `tracing` log to stderr: text for a
//! person (the default), or JSON lines for a log collector
//! (`--log-format json`). `RUST_LOG` filters both (default `info`).
//!
//! A JSON line is one object: `timestamp` (RFC 3339), `level`, `target`,
//! `message` and the event's fields at the top level, and the spans it
//! happened in under `spans`. The events are the same as in text: nothing
//! a process does not log in text appears in JSON (no credential is ever
//! a field; see each crate's README).

use clap::ValueEnum;

/// `--log-format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (colours on a terminal)
    #[default]
    Text,
    /// One JSON object per line
    Json,
}

impl LogFormat {
    /// As the command line spells it (what `up` passes to its parts).
    pub fn as_arg(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// Installs the process's subscriber (once; later calls change nothing).
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .try_init(),
    };
}
