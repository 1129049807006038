//! git smart HTTP through the real `git http-backend` CGI.
//!
//! Request bodies stream into the backend's stdin and its stdout streams back
//! as the response body, so pushes and clones of any size pass without being
//! held in memory. `Content-Encoding: gzip` is left to http-backend, which
//! inflates request bodies itself when `HTTP_CONTENT_ENCODING` says so.
//!
//! A push by an installation token without the `workflows` permission may
//! not create or change anything under `.github/workflows/`: GitHub refuses
//! it with "refusing to allow a GitHub App to create or update workflow
//! `…` without `workflows` permission". A `pre-receive` hook (set for every
//! repository through `core.hooksPath`) checks the pushed commits and, told
//! so by the environment, prints that line and declines the push before
//! any ref moves; the push report is then rewritten so the line is the
//! refused ref's reason (`ng <ref> refusing …`), where GitHub puts it,
//! instead of receive-pack's "pre-receive hook declined".

use std::path::Path;
use std::process::Stdio;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, Channel};
use hyper::body::Incoming;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::record::BODY_RECORD_LIMIT;
use crate::server::Body;

/// The three smart-HTTP endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GitEndpoint {
    InfoRefs,
    UploadPack,
    ReceivePack,
}

/// A parsed git smart-HTTP path: `/{owner}/{repo}[.git]/{endpoint}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GitPath {
    pub owner: String,
    pub name: String,
    pub endpoint: GitEndpoint,
}

/// Recognise a smart-HTTP path; GitHub accepts the repository with or
/// without the `.git` suffix.
pub(crate) fn git_path(path: &str) -> Option<GitPath> {
    let segments: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
    let (owner, repo, endpoint) = match segments.as_slice() {
        [owner, repo, "info", "refs"] => (*owner, *repo, GitEndpoint::InfoRefs),
        [owner, repo, "git-upload-pack"] => (*owner, *repo, GitEndpoint::UploadPack),
        [owner, repo, "git-receive-pack"] => (*owner, *repo, GitEndpoint::ReceivePack),
        _ => return None,
    };
    let name = repo.strip_suffix(".git").unwrap_or(repo);
    if !super::rest::valid_name(owner) || !super::rest::valid_name(name) {
        return None;
    }
    Some(GitPath {
        owner: owner.to_owned(),
        name: name.to_owned(),
        endpoint,
    })
}

/// What the CGI needs besides the body.
pub(crate) struct CgiRequest<'a> {
    pub project_root: &'a Path,
    /// `/{owner}/{name}.git/...` with the stored spelling of owner and name.
    pub path_info: String,
    pub method: &'a str,
    pub query: &'a str,
    pub headers: &'a http::HeaderMap,
    pub remote_user: &'a str,
    /// Refuse new commits touching `.github/workflows/` (a token without
    /// the `workflows` permission).
    pub refuse_workflows: bool,
}

/// Directory, inside the project root, holding the emulator's hooks; not a
/// valid owner name, so never served as a repository.
const HOOKS_DIR: &str = ".emulator-hooks";

/// The `pre-receive` hook: for each updated ref, the commits new to the
/// repository (`--not --all`: what no existing ref reaches) that touch
/// `.github/workflows/`; the first such file refuses the push.
const PRE_RECEIVE: &str = r#"#!/bin/sh
[ "$EMULATOR_REFUSE_WORKFLOWS" = 1 ] || exit 0
zero=0000000000000000000000000000000000000000
while read -r old new ref; do
  [ "$new" = "$zero" ] && continue
  file=$(git log --format= --name-only --no-renames "$new" --not --all -- .github/workflows/ | sed -n '/./{p;q;}')
  if [ -n "$file" ]; then
    echo "refusing to allow a GitHub App to create or update workflow \`$file\` without \`workflows\` permission" >&2
    exit 1
  fi
done
exit 0
"#;

/// Write the hook under `project_root` (once; rewriting the same text is
/// harmless) and return its directory.
fn ensure_hooks(project_root: &Path) -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = project_root.join(HOOKS_DIR);
    let hook = dir.join("pre-receive");
    if std::fs::read_to_string(&hook).ok().as_deref() != Some(PRE_RECEIVE) {
        std::fs::create_dir_all(&dir)?;
        // Written aside and renamed, so a concurrent push never runs half a hook.
        let partial = dir.join(format!("pre-receive.{}", std::process::id()));
        std::fs::write(&partial, PRE_RECEIVE)?;
        std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755))?;
        std::fs::rename(&partial, &hook)?;
    }
    Ok(dir)
}

/// Failure talking to `git http-backend`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GitError {
    /// The backend could not be started or its output could not be read.
    #[error("git http-backend: {0}")]
    Io(#[from] std::io::Error),
    /// The backend's CGI header block was malformed.
    #[error("git http-backend answered a malformed CGI header: {0}")]
    BadCgiHeader(String),
}

/// Largest CGI header block accepted from the backend.
const MAX_CGI_HEADER: usize = 64 * 1024;

/// Called once the request body has streamed through: its first
/// `BODY_RECORD_LIMIT` bytes and whether there was more.
pub(crate) type BodyCapture = Box<dyn FnOnce(Vec<u8>, bool) + Send>;

/// Run `git http-backend` for one request and stream its answer.
pub(crate) async fn serve(
    request: CgiRequest<'_>,
    body: Incoming,
    capture: BodyCapture,
) -> Result<Response<Body>, GitError> {
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let hooks = ensure_hooks(request.project_root)?;
    let mut command = tokio::process::Command::new("git");
    command
        .arg("http-backend")
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("GIT_PROJECT_ROOT", request.project_root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        // http-backend spools fetch negotiations in its own memory, 10 MB by
        // default; large histories need more.
        .env("GIT_HTTP_MAX_REQUEST_BUFFER", "256M")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", request.project_root)
        // Pushing needs http.receivepack; the bare repositories are ours.
        .env("GIT_CONFIG_COUNT", "3")
        .env("GIT_CONFIG_KEY_0", "http.receivepack")
        .env("GIT_CONFIG_VALUE_0", "true")
        .env("GIT_CONFIG_KEY_1", "safe.directory")
        .env("GIT_CONFIG_VALUE_1", "*")
        .env("GIT_CONFIG_KEY_2", "core.hooksPath")
        .env("GIT_CONFIG_VALUE_2", &hooks)
        .env(
            "EMULATOR_REFUSE_WORKFLOWS",
            if request.refuse_workflows { "1" } else { "0" },
        )
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("SERVER_PROTOCOL", "HTTP/1.1")
        .env("REQUEST_METHOD", request.method)
        .env("PATH_INFO", &request.path_info)
        .env("QUERY_STRING", request.query)
        .env("REMOTE_USER", request.remote_user)
        .env("REMOTE_ADDR", "127.0.0.1");
    for (var, name) in [
        ("CONTENT_TYPE", "content-type"),
        ("CONTENT_LENGTH", "content-length"),
        ("HTTP_CONTENT_ENCODING", "content-encoding"),
        ("HTTP_GIT_PROTOCOL", "git-protocol"),
    ] {
        if let Some(value) = header(name) {
            command.env(var, value);
        }
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let (Some(mut stdin), Some(stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(GitError::Io(std::io::Error::other("child pipes missing")));
    };

    // Request body → stdin, frame by frame.
    // The response ends only after the request body has been recorded, so a
    // client that saw the whole answer also sees the complete record.
    let (body_done, body_recorded) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let mut body = body;
        let mut prefix = Vec::new();
        let mut truncated = false;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { break };
            if let Ok(data) = frame.into_data() {
                let room = BODY_RECORD_LIMIT - prefix.len();
                prefix.extend_from_slice(&data[..data.len().min(room)]);
                truncated |= data.len() > room;
                if stdin.write_all(&data).await.is_err() {
                    break;
                }
            }
        }
        capture(prefix, truncated);
        let _ = body_done.send(());
        // Dropping stdin here is what tells the backend the body ended.
        drop(stdin);
    });
    tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        if !text.trim().is_empty() {
            tracing::debug!(stderr = %text.trim(), "git http-backend");
        }
    });

    let mut stdout = BufReader::with_capacity(64 * 1024, stdout);
    let mut builder = Response::builder();
    let mut status = StatusCode::OK;
    let mut header_bytes = 0;
    loop {
        let mut line = String::new();
        let read = stdout.read_line(&mut line).await?;
        header_bytes += read;
        if read == 0 || header_bytes > MAX_CGI_HEADER {
            return Err(GitError::BadCgiHeader("no end of headers".into()));
        }
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| GitError::BadCgiHeader(line.to_owned()))?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split(' ').next().unwrap_or("");
            status = code
                .parse::<u16>()
                .ok()
                .and_then(|c| StatusCode::from_u16(c).ok())
                .ok_or_else(|| GitError::BadCgiHeader(line.to_owned()))?;
        } else {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| GitError::BadCgiHeader(line.to_owned()))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| GitError::BadCgiHeader(line.to_owned()))?;
            builder = builder.header(name, value);
        }
    }

    // Rest of stdout → response body; the child is reaped when it ends.
    let (mut sender, channel) = Channel::<Bytes, std::io::Error>::new(4);
    let rewrite = request.refuse_workflows && request.path_info.ends_with("/git-receive-pack");
    tokio::spawn(async move {
        if rewrite {
            // A push report is small: read it whole to put the hook's reason
            // where GitHub puts it.
            let mut report = Vec::new();
            let read = (&mut stdout)
                .take(MAX_REPORT as u64)
                .read_to_end(&mut report)
                .await;
            if let Err(error) = read {
                sender.abort(error);
                return;
            }
            let report = with_hook_reason(&report).unwrap_or(report);
            if sender.send_data(Bytes::from(report)).await.is_err() {
                return;
            }
        }
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            match stdout.read(&mut buffer).await {
                Ok(0) => break,
                Ok(n) => {
                    if sender
                        .send_data(Bytes::copy_from_slice(&buffer[..n]))
                        .await
                        .is_err()
                    {
                        // The client went away: dropping the child kills it.
                        return;
                    }
                }
                Err(error) => {
                    sender.abort(error);
                    return;
                }
            }
        }
        let _ = body_recorded.await;
        let _ = child.wait().await;
        drop(sender);
    });
    builder
        .status(status)
        .body(channel.boxed())
        .map_err(|e| GitError::BadCgiHeader(e.to_string()))
}

/// Largest push report rewritten; anything longer streams on unchanged.
const MAX_REPORT: usize = 1 << 20;

/// One pkt-line: `None` for a flush (`0000`).
fn pkt_lines(mut data: &[u8]) -> Option<Vec<Option<&[u8]>>> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let len = usize::from_str_radix(std::str::from_utf8(data.get(..4)?).ok()?, 16).ok()?;
        if len == 0 {
            out.push(None);
            data = &data[4..];
            continue;
        }
        out.push(Some(data.get(4..len)?));
        data = &data[len..];
    }
    Some(out)
}

fn pkt(out: &mut Vec<u8>, payload: &[u8]) {
    out.extend_from_slice(format!("{:04x}", payload.len() + 4).as_bytes());
    out.extend_from_slice(payload);
}

/// A side-band push report in which the hook declined a ref for a workflow
/// file, with the hook's reason in the ref's status (`ng <ref> refusing to
/// allow …`), as GitHub reports it; `None` to leave the report as it is.
fn with_hook_reason(report: &[u8]) -> Option<Vec<u8>> {
    let packets = pkt_lines(report)?;
    let mut reason = None;
    let mut status = Vec::new();
    for payload in packets.iter().flatten() {
        match payload.split_first() {
            Some((1, data)) => status.extend_from_slice(data),
            Some((2, data)) => {
                let text = String::from_utf8_lossy(data);
                if let Some(line) = text
                    .lines()
                    .find(|l| l.starts_with("refusing to allow a GitHub App"))
                {
                    reason = Some(line.to_owned());
                }
            }
            _ => {}
        }
    }
    let reason = reason?;
    let mut rewritten = Vec::new();
    let mut changed = false;
    for line in pkt_lines(&status)? {
        match line {
            None => rewritten.extend_from_slice(b"0000"),
            Some(line) => match std::str::from_utf8(line)
                .ok()
                .and_then(|l| l.strip_suffix(" pre-receive hook declined\n"))
                .and_then(|l| l.strip_prefix("ng "))
            {
                Some(name) => {
                    changed = true;
                    pkt(&mut rewritten, format!("ng {name} {reason}\n").as_bytes());
                }
                None => pkt(&mut rewritten, line),
            },
        }
    }
    if !changed {
        return None;
    }
    // Band 1 goes once, where it first was; the rest keeps its order.
    let mut out = Vec::new();
    let mut placed = false;
    for packet in packets {
        match packet {
            None => out.extend_from_slice(b"0000"),
            Some(payload) if payload.first() == Some(&1) => {
                if !placed {
                    placed = true;
                    for chunk in rewritten.chunks(65515) {
                        let mut band = vec![1];
                        band.extend_from_slice(chunk);
                        pkt(&mut out, &band);
                    }
                }
            }
            // The hook's line now stands in the status; GitHub shows it once.
            Some(payload) if payload.first() == Some(&2) => {
                let text = String::from_utf8_lossy(&payload[1..]);
                let kept: String = text
                    .split_inclusive('\n')
                    .filter(|l| l.trim_end() != reason)
                    .collect();
                if !kept.is_empty() {
                    pkt(&mut out, &[&[2u8][..], kept.as_bytes()].concat());
                }
            }
            Some(payload) => pkt(&mut out, payload),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hooks_reason_goes_into_the_refs_status() {
        let reason = "refusing to allow a GitHub App to create or update workflow `.github/workflows/x.yml` without `workflows` permission";
        let mut inner = Vec::new();
        pkt(&mut inner, b"unpack ok\n");
        pkt(&mut inner, b"ng refs/heads/ci pre-receive hook declined\n");
        inner.extend_from_slice(b"0000");
        let mut report = Vec::new();
        pkt(&mut report, format!("\x02{reason}\n").as_bytes());
        pkt(&mut report, &[&[1u8][..], &inner].concat());
        report.extend_from_slice(b"0000");
        let rewritten = with_hook_reason(&report).unwrap();
        let text = String::from_utf8_lossy(&rewritten);
        assert!(
            text.contains(&format!("ng refs/heads/ci {reason}\n")),
            "{text}"
        );
        assert!(!text.contains("hook declined"));
        assert_eq!(text.matches(reason).count(), 1, "shown once: {text}");
        // Every length still adds up.
        let packets = pkt_lines(&rewritten).unwrap();
        let band: Vec<u8> = packets
            .iter()
            .flatten()
            .filter(|p| p[0] == 1)
            .flat_map(|p| p[1..].to_vec())
            .collect();
        assert_eq!(pkt_lines(&band).unwrap().len(), 3);
        // A report without the hook's reason, or a refusal for another
        // reason, is left alone.
        let mut other = Vec::new();
        pkt(&mut other, &[&[1u8][..], &inner].concat());
        other.extend_from_slice(b"0000");
        assert_eq!(with_hook_reason(&other), None);
        assert_eq!(with_hook_reason(b"00zz"), None);
    }

    #[test]
    fn recognises_smart_http_paths() {
        let p = |owner: &str, name: &str, endpoint| {
            Some(GitPath {
                owner: owner.into(),
                name: name.into(),
                endpoint,
            })
        };
        for (path, expected) in [
            ("/o/r.git/info/refs", p("o", "r", GitEndpoint::InfoRefs)),
            ("/o/r/info/refs", p("o", "r", GitEndpoint::InfoRefs)),
            (
                "/o/r.git/git-upload-pack",
                p("o", "r", GitEndpoint::UploadPack),
            ),
            (
                "/o/r.git/git-receive-pack",
                p("o", "r", GitEndpoint::ReceivePack),
            ),
            ("/o/r.git/objects/info/packs", None),
            ("/o/../info/refs", None),
            ("/o/.git/info/refs", None),
            ("/repos/o/r", None),
            ("/o/r.git/info/refs/", None),
        ] {
            assert_eq!(git_path(path), expected, "{path}");
        }
    }
}
