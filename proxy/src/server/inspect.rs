//! Reads as much of a request body as the rule's check (and message
//! hashing) needs, decides, then replays what was read ahead of the rest of
//! the stream. The decision on the bytes read so far is pure ([`judge`]);
//! [`inspect_body`] is the reading loop around it.

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderMap};
use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};
use sha2::{Digest, Sha256};

use super::heavy::{HeavyPool, NotRun, INLINE_BYTES};
use super::message::message_record;
use super::policy::{BodyCheckFn, BodyVerdict, Grant, MessageSpec, Passed};
use crate::audit::MessageRecord;
use crate::body::{self, PrefixedBody, ProxyBody};
use crate::graphql::{KnownIds, Learn};
use crate::receive_pack::StatusReport;

/// Largest body buffered to hash a message or to find the created id.
pub(super) const MESSAGE_BODY_LIMIT: usize = 1 << 20;

/// The body as it will be forwarded, and what was learnt reading it.
pub(super) struct Inspected {
    pub(super) body: ProxyBody,
    pub(super) sha256: Option<String>,
    /// The whole body, when it was read to hash a message.
    pub(super) whole: Option<Bytes>,
    /// Ids the check asks to learn from the answer.
    pub(super) learn: Vec<Learn>,
    /// The message the check found the body to post (a GraphQL mutation);
    /// `sha256` and `whole` are then set, as for a rule's message.
    pub(super) message: Option<MessageSpec>,
    /// The whole body when it was read to its end (or there is none): the
    /// request can be sent again.
    pub(super) replay: Option<Bytes>,
}

/// Why a body was refused, and for a git push, how to tell git.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct BodyRefusal {
    pub(super) reason: String,
    pub(super) git_report: Option<StatusReport>,
    /// Not judged, for want of a slot on the pool of body checks.
    pub(super) busy: Option<Busy>,
}

/// Which slot of the pool of body checks a request found taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Busy {
    /// The whole queue (answered 503: the proxy is busy).
    Pool,
    /// The identity's own share (answered 429: this identity sends too many).
    OwnShare,
}

impl From<String> for BodyRefusal {
    fn from(reason: String) -> Self {
        Self {
            reason,
            git_report: None,
            busy: None,
        }
    }
}

impl From<NotRun> for BodyRefusal {
    fn from(not_run: NotRun) -> Self {
        Self {
            busy: match not_run {
                NotRun::Busy(_) => Some(Busy::Pool),
                NotRun::OwnShare(_) => Some(Busy::OwnShare),
                NotRun::Failed => None,
            },
            ..not_run.to_string().into()
        }
    }
}

impl From<&str> for BodyRefusal {
    fn from(reason: &str) -> Self {
        reason.to_string().into()
    }
}

/// The most bytes read before a verdict: the check's limit, and the whole
/// message (up to [`MESSAGE_BODY_LIMIT`]) when the call is a message.
fn read_limit(grant: &Grant) -> usize {
    let need_all = grant.message.is_some();
    grant.body.as_ref().map_or(MESSAGE_BODY_LIMIT, |c| {
        c.limit.max(if need_all { MESSAGE_BODY_LIMIT } else { 0 })
    })
}

/// Whether the body is what the proxy reads: every `Content-Encoding`
/// header, every comma-separated coding in each, is `identity` (any case).
/// `identity, gzip` or a second `Content-Encoding: gzip` header make the
/// upstream decode what the check saw as opaque bytes; an empty or
/// unreadable value is refused too.
fn identity_encoded(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .all(|value| {
            value.to_str().is_ok_and(|v| {
                v.split(',')
                    .all(|coding| coding.trim().eq_ignore_ascii_case("identity"))
            })
        })
}

/// A body check's decision on the bytes read so far: `Ok(Some(passed))` to
/// let the body pass (with what to learn from the answer, or the message it
/// posts), `Ok(None)` to read more. `name` is the check's.
fn judge(
    name: &str,
    check: &mut BodyCheckFn,
    prefix: &[u8],
    complete: bool,
) -> Result<Option<Passed>, BodyRefusal> {
    match check(prefix, complete) {
        BodyVerdict::Allow => Ok(Some(Passed::default())),
        BodyVerdict::Pass(passed) => Ok(Some(passed)),
        BodyVerdict::Deny(reason) => Err(BodyRefusal {
            reason,
            git_report: (name == "receive_pack")
                .then(|| StatusReport::requested(prefix))
                .flatten(),
            busy: None,
        }),
        BodyVerdict::NeedMore if complete => {
            Err(format!("the {name} body ended before it could be checked").into())
        }
        BodyVerdict::NeedMore => Ok(None),
    }
}

/// Whether a check's call runs on the pool of body checks: the one call of
/// a whole-body check that reads a body larger than [`INLINE_BYTES`].
fn on_pool(incremental: bool, len: usize, complete: bool) -> bool {
    !incremental && complete && len > INLINE_BYTES
}

/// A started check of one body: its name, whether it is incremental, and
/// its state.
type Running = (&'static str, bool, Box<BodyCheckFn>);

/// [`judge`], on the pool when [`on_pool`] says so; the check and the
/// prefix come back for the next read.
async fn judge_in_turn(
    (pool, identity): (&HeavyPool, &str),
    (name, incremental, mut check): Running,
    prefix: BytesMut,
    complete: bool,
) -> Result<(Running, BytesMut, Option<Passed>), BodyRefusal> {
    if !on_pool(incremental, prefix.len(), complete) {
        let verdict = judge(name, check.as_mut(), &prefix, complete)?;
        return Ok(((name, incremental, check), prefix, verdict));
    }
    let judged = pool
        .run(identity, move || {
            let verdict = judge(name, check.as_mut(), &prefix, complete);
            (check, prefix, verdict)
        })
        .await;
    let (check, prefix, verdict) = judged?;
    Ok(((name, incremental, check), prefix, verdict?))
}

/// The message record of a message-bearing call ([`message_record`]);
/// its JSON check runs on the pool when the body is larger than
/// [`INLINE_BYTES`].
pub(super) async fn checked_message(
    (pool, identity): (&HeavyPool, &str),
    spec: &MessageSpec,
    sha256: &str,
    whole: Option<Bytes>,
) -> Result<MessageRecord, BodyRefusal> {
    if whole.as_ref().map_or(0, Bytes::len) <= INLINE_BYTES {
        return Ok(message_record(spec, sha256, whole.as_deref())?);
    }
    let (spec, sha256) = (spec.clone(), sha256.to_owned());
    let record = pool
        .run(identity, move || {
            message_record(&spec, &sha256, whole.as_deref())
        })
        .await?;
    Ok(record?)
}

pub(super) async fn inspect_body(
    headers: &HeaderMap,
    mut incoming: Incoming,
    grant: &Grant,
    known: &KnownIds,
    pool: (&HeavyPool, &str),
) -> Result<Inspected, BodyRefusal> {
    let need_all = grant.message.is_some();
    if grant.body.is_none() && !need_all {
        let replay = incoming.is_end_stream().then(Bytes::new);
        return Ok(Inspected {
            body: body::boxed(incoming),
            sha256: None,
            whole: None,
            learn: Vec::new(),
            message: None,
            replay,
        });
    }
    if !identity_encoded(headers) {
        return Err(
            "encoded (compressed) bodies cannot be inspected and are refused for this rule".into(),
        );
    }
    let limit = read_limit(grant);
    let mut prefix = BytesMut::new();
    let mut complete = incoming.is_end_stream();
    let mut verdict_ok = grant.body.is_none();
    let mut passed = Passed::default();
    // One check per request: it may keep what it parsed between reads.
    let mut checker: Option<Running> = grant
        .body
        .as_ref()
        .map(|c| (c.name, c.incremental, (c.start)(known)));
    loop {
        // Nothing to decide on until the first bytes (or the end) arrive.
        let ready = complete || !prefix.is_empty();
        if !verdict_ok && ready {
            // Without a check the body needs none (`verdict_ok` is then set).
            let Some(running) = checker.take() else {
                return Err("the body check was lost".into());
            };
            let (running, back, verdict) = judge_in_turn(pool, running, prefix, complete).await?;
            (checker, prefix) = (Some(running), back);
            if let Some(verdict) = verdict {
                verdict_ok = true;
                passed = verdict;
            }
        }
        if complete || (verdict_ok && !need_all) {
            break;
        }
        if prefix.len() > limit {
            return Err(format!("the body is too large to be checked (over {limit} bytes)").into());
        }
        match incoming.frame().await {
            None => complete = true,
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    prefix.extend_from_slice(&data);
                }
            }
            Some(Err(e)) => return Err(format!("reading the request body failed: {e}").into()),
        }
    }
    // A message the check found is hashed as a rule's is: the whole body.
    // Checks that find one decide on the whole body only.
    let need_all = need_all || passed.message.is_some();
    if need_all && !complete {
        return Err("a message body must be read whole before it is forwarded".into());
    }
    let sha256 = need_all.then(|| hex::encode(Sha256::digest(&prefix)));
    let prefix = prefix.freeze();
    let whole = need_all.then(|| prefix.clone());
    let replay = complete.then(|| prefix.clone());
    let body = if complete {
        body::full(prefix)
    } else {
        body::boxed(PrefixedBody::new(prefix, incoming))
    };
    Ok(Inspected {
        body,
        sha256,
        whole,
        learn: passed.learn,
        message: passed.message,
        replay,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::rules::Injection;
    use crate::server::policy::{BodyChecker, MessageSpec};

    fn checker(name: &'static str, limit: usize, verdict: BodyVerdict) -> BodyChecker {
        BodyChecker {
            name,
            limit,
            incremental: false,
            start: Arc::new(move |_: &KnownIds| {
                let verdict = verdict.clone();
                Box::new(move |_: &[u8], _: bool| verdict.clone())
            }),
        }
    }

    fn grant(body: Option<BodyChecker>, message: bool) -> Grant {
        Grant {
            rule_set: "s".into(),
            rule: "r".into(),
            credential: "c".into(),
            inject: Injection::Bearer,
            message: message.then(|| MessageSpec {
                kind: "k".into(),
                target: "t".into(),
                target_body_pointer: None,
                id_pointer: "/id".into(),
            }),
            body,
            permissions: BTreeMap::new(),
            own: None,
        }
    }

    #[test]
    fn content_encodings_table() {
        // (Content-Encoding headers, the body is read as sent)
        let cases: &[(&[&str], bool)] = &[
            (&[], true),
            (&["identity"], true),
            (&["IDENTITY"], true),
            (&["identity, identity"], true),
            (&["identity", "identity"], true),
            (&["gzip"], false),
            (&["identity, gzip"], false),
            (&["identity", "gzip"], false),
            (&["identity", "identity,br"], false),
            (&["gzip, identity"], false),
            (&[""], false),
            (&["identity,"], false),
            (&["x-identity"], false),
        ];
        for (values, plain) in cases {
            let mut h = HeaderMap::new();
            for v in *values {
                h.append(header::CONTENT_ENCODING, v.parse().unwrap());
            }
            assert_eq!(identity_encoded(&h), *plain, "{values:?}");
        }
    }

    #[test]
    fn read_limits_table() {
        let small = || Some(checker("graphql", 10, BodyVerdict::Allow));
        let large = || {
            Some(checker(
                "graphql",
                4 * MESSAGE_BODY_LIMIT,
                BodyVerdict::Allow,
            ))
        };
        let cases = [
            (grant(None, true), MESSAGE_BODY_LIMIT),
            (grant(small(), false), 10),
            (grant(small(), true), MESSAGE_BODY_LIMIT),
            (grant(large(), true), 4 * MESSAGE_BODY_LIMIT),
            (grant(large(), false), 4 * MESSAGE_BODY_LIMIT),
        ];
        for (i, (grant, limit)) in cases.into_iter().enumerate() {
            assert_eq!(read_limit(&grant), limit, "case {i}");
        }
    }

    #[test]
    fn only_a_whole_body_check_of_a_large_body_goes_to_the_pool() {
        // (incremental, bytes, complete, on the pool)
        let cases = [
            (false, INLINE_BYTES + 1, true, true),
            (false, 1 << 20, true, true),
            (false, INLINE_BYTES, true, false),
            (false, 10, true, false),
            (false, 1 << 20, false, false),
            (true, 1 << 20, true, false),
            (true, 1 << 20, false, false),
        ];
        for (incremental, len, complete, pooled) in cases {
            assert_eq!(
                on_pool(incremental, len, complete),
                pooled,
                "{incremental} {len} {complete}"
            );
        }
    }

    #[test]
    fn a_full_pool_or_share_is_a_busy_refusal_a_failed_check_a_plain_one() {
        let busy = BodyRefusal::from(NotRun::Busy(16));
        assert!(
            busy.busy == Some(Busy::Pool) && busy.reason.contains("16"),
            "{busy:?}"
        );
        let own = BodyRefusal::from(NotRun::OwnShare(4));
        assert!(
            own.busy == Some(Busy::OwnShare)
                && own.reason.contains("share")
                && own.reason.contains('4'),
            "{own:?}"
        );
        assert_eq!(BodyRefusal::from(NotRun::Failed).busy, None);
        assert_eq!(BodyRefusal::from("no").busy, None);
    }

    #[test]
    fn verdicts_table() {
        let push = {
            let command = format!(
                "{} {} refs/heads/main\0report-status\n",
                "1".repeat(40),
                "2".repeat(40)
            );
            let mut p = crate::receive_pack::pkt_line(command.as_bytes());
            p.extend_from_slice(b"0000");
            p
        };
        let deny = || BodyVerdict::Deny("no".into());
        let learnt = || Passed {
            learn: vec![Learn {
                kind: crate::graphql::REPOSITORY_NODE,
                pointer: "/data/createPullRequest/pullRequest/id".into(),
            }],
            message: Some(MessageSpec {
                kind: "github_pull_request".into(),
                target: "o/r".into(),
                target_body_pointer: None,
                id_pointer: "/data/createPullRequest/pullRequest/url".into(),
            }),
        };
        let refused = |git_report| BodyRefusal {
            reason: "no".into(),
            git_report,
            busy: None,
        };
        let ended = |name: &str| {
            BodyRefusal::from(format!("the {name} body ended before it could be checked"))
        };
        // (checker, prefix, complete, expected)
        let cases = [
            (
                checker("graphql", 9, BodyVerdict::Allow),
                &b"{}"[..],
                true,
                Ok(Some(Passed::default())),
            ),
            (
                checker("graphql", 9, BodyVerdict::Pass(learnt())),
                &b"{}"[..],
                true,
                Ok(Some(learnt())),
            ),
            (
                checker("graphql", 9, BodyVerdict::NeedMore),
                &b"{"[..],
                false,
                Ok(None),
            ),
            (
                checker("graphql", 9, BodyVerdict::NeedMore),
                &b"{"[..],
                true,
                Err(ended("graphql")),
            ),
            (
                checker("graphql", 9, deny()),
                &b"{}"[..],
                true,
                Err(refused(None)),
            ),
            // Only a push refusal carries a report, and only if git asked for one.
            (
                checker("graphql", 9, deny()),
                &push[..],
                false,
                Err(refused(None)),
            ),
            (
                checker("receive_pack", 9, deny()),
                &push[..],
                false,
                Err(refused(StatusReport::requested(&push))),
            ),
            (
                checker("receive_pack", 9, deny()),
                &b"0000"[..],
                true,
                Err(refused(None)),
            ),
        ];
        for (i, (check, prefix, complete, expected)) in cases.into_iter().enumerate() {
            let mut run = (check.start)(&KnownIds::default());
            assert_eq!(
                judge(check.name, run.as_mut(), prefix, complete),
                expected,
                "case {i}"
            );
        }
        assert!(StatusReport::requested(&push).is_some());
    }
}
