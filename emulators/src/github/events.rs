//! Issue events and the issue timeline: what happened to an issue or pull
//! request besides its comments, recorded as the model changes, in the
//! shapes of GitHub's REST description (github/rest-api-description:
//! `issue-event-for-issue` for `GET …/issues/{n}/events`, its members
//! `labeled-issue-event`, `assigned-issue-event`, `review-requested-issue-event`,
//! `renamed-issue-event`, `state-change-issue-event`; and
//! `timeline-issue-events` for `GET …/issues/{n}/timeline`, which adds
//! `timeline-comment-event` and `timeline-reviewed-event`).
//!
//! Recorded: `closed`, `reopened`, `merged`, `labeled`, `renamed`,
//! `assigned` and `review_requested`; in the timeline also
//! `cross-referenced` (another issue or pull request mentioning this one)
//! and a pull request's `committed` items (its commits, read from git by
//! the server). Not recorded (GitHub has them): `referenced`, `mentioned`,
//! `subscribed`, `unlabeled`, `unassigned`, `head_ref_*`, … .

use serde_json::{json, Value};

use super::model::{node_id, CommentKind, Model};
use crate::time::iso8601;

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EventKind {
    Closed,
    Reopened,
    /// A pull request merged, by its merge commit.
    Merged {
        commit_id: String,
    },
    Labeled {
        name: String,
    },
    Renamed {
        from: String,
        to: String,
    },
    Assigned {
        assignee: String,
    },
    ReviewRequested {
        reviewer: String,
    },
}

impl EventKind {
    /// GitHub's `event` name.
    fn name(&self) -> &'static str {
        match self {
            EventKind::Closed => "closed",
            EventKind::Reopened => "reopened",
            EventKind::Merged { .. } => "merged",
            EventKind::Labeled { .. } => "labeled",
            EventKind::Renamed { .. } => "renamed",
            EventKind::Assigned { .. } => "assigned",
            EventKind::ReviewRequested { .. } => "review_requested",
        }
    }

    /// The prefix of the event's GraphQL node id (`ClosedEvent` → `CE_`, …).
    fn node_prefix(&self) -> &'static str {
        match self {
            EventKind::Closed => "CE",
            EventKind::Reopened => "REE",
            EventKind::Merged { .. } => "ME",
            EventKind::Labeled { .. } => "LE",
            EventKind::Renamed { .. } => "RTE",
            EventKind::Assigned { .. } => "AE",
            EventKind::ReviewRequested { .. } => "RRE",
        }
    }
}

/// One event of issue (or pull request) `number`.
#[derive(Debug, Clone)]
pub(crate) struct IssueEvent {
    pub id: u64,
    pub repo_id: u64,
    pub number: u64,
    pub actor: String,
    pub kind: EventKind,
    pub created_at: u64,
}

impl Model {
    /// Record that `actor` did `kind` to issue `number` at `now`.
    pub fn record_event(
        &mut self,
        repo_id: u64,
        number: u64,
        actor: &str,
        kind: EventKind,
        now: u64,
    ) {
        let id = self.fresh_id();
        self.events.push(IssueEvent {
            id,
            repo_id,
            number,
            actor: actor.to_owned(),
            kind,
            created_at: now,
        });
    }

    /// An event as `GET …/issues/{n}/events` lists it.
    pub fn event_json(&self, event: &IssueEvent) -> Value {
        let Some(repo) = self.repo_by_id(event.repo_id) else {
            return Value::Null;
        };
        let api = format!("{}/repos/{}", super::model::API_BASE, repo.full_name());
        let commit_id = match &event.kind {
            EventKind::Merged { commit_id } => Some(commit_id.clone()),
            _ => None,
        };
        let is_pull = self
            .issue(event.repo_id, event.number)
            .is_some_and(|i| i.pull.is_some());
        let mut value = json!({
            "id": event.id,
            "node_id": node_id(event.kind.node_prefix(), event.id),
            "url": format!("{api}/issues/events/{}", event.id),
            "actor": Model::user_json(&event.actor),
            "event": event.kind.name(),
            "commit_url": commit_id.as_ref().map(|c| format!("{api}/commits/{c}")),
            "commit_id": commit_id,
            "created_at": iso8601(event.created_at),
            "performed_via_github_app": Model::app_json(&event.actor),
        });
        match &event.kind {
            // `state_reason` of an issue; pull requests have none.
            EventKind::Closed => {
                value["state_reason"] = if is_pull {
                    Value::Null
                } else {
                    json!("completed")
                };
            }
            EventKind::Reopened => {
                value["state_reason"] = if is_pull {
                    Value::Null
                } else {
                    json!("reopened")
                };
            }
            EventKind::Merged { .. } => {}
            EventKind::Labeled { name } => {
                let label = super::model::label_json(repo, name);
                value["label"] = json!({"name": name, "color": label["color"]});
            }
            EventKind::Renamed { from, to } => value["rename"] = json!({"from": from, "to": to}),
            EventKind::Assigned { assignee } => {
                value["assignee"] = Model::user_json(assignee);
                value["assigner"] = Model::user_json(&event.actor);
            }
            EventKind::ReviewRequested { reviewer } => {
                value["review_requester"] = Model::user_json(&event.actor);
                value["requested_reviewer"] = Model::user_json(reviewer);
            }
        }
        value
    }

    /// The events of issue `number`, oldest first.
    pub fn issue_events_json(&self, repo_id: u64, number: u64) -> Vec<Value> {
        self.events
            .iter()
            .filter(|e| e.repo_id == repo_id && e.number == number)
            .map(|e| self.event_json(e))
            .collect()
    }

    /// The timeline of issue `number`, oldest first: its events, its
    /// comments (`commented`, the comment with `event` and `actor`) and,
    /// for a pull request, its reviews (`reviewed`, with `_links` and the
    /// head commit) and `commits` (`committed`, as `GET …/pulls/{n}/commits`
    /// lists them, at their committer date). Review comments
    /// (`line-commented`) are not in it.
    pub fn timeline_json(&self, repo_id: u64, number: u64, commits: &[Value]) -> Vec<Value> {
        let Some(issue) = self.issue(repo_id, number) else {
            return Vec::new();
        };
        // (time, id, item): GitHub orders the timeline by time.
        let mut items: Vec<(u64, u64, Value)> = self
            .events
            .iter()
            .filter(|e| e.repo_id == repo_id && e.number == number)
            .map(|e| (e.created_at, e.id, self.event_json(e)))
            .collect();
        for c in self.comments.iter().filter(|c| {
            c.comment.kind == CommentKind::Issue
                && c.repo_id == repo_id
                && c.comment.number == number
        }) {
            let mut value = self.comment_json(c);
            value["event"] = json!("commented");
            value["actor"] = Model::user_json(&c.comment.author);
            items.push((c.created_at, c.comment.id, value));
        }
        let head_sha = issue.pull.as_ref().map(|p| p.head_sha.clone());
        for r in self
            .reviews
            .iter()
            .filter(|r| r.repo_id == repo_id && r.number == number)
        {
            let mut value = self.review_json(r);
            value["event"] = json!("reviewed");
            value["commit_id"] = json!(head_sha);
            value["_links"] = json!({
                "html": {"href": value["html_url"]},
                "pull_request": {"href": value["pull_request_url"]},
            });
            items.push((r.submitted_at, r.id, value));
        }
        // Another issue or pull request of the repository that mentions
        // `#number` in its body or a comment: `cross-referenced`, in the
        // timeline only (`timeline-cross-referenced-event`: `event`,
        // `actor`, `created_at`, `updated_at`, `source` {`type`: "issue",
        // `issue`}), once per mentioning issue, at its first mention.
        let mut first_mention: Vec<(u64, u64, String)> = Vec::new();
        let mut mention = |source: u64, at: u64, author: &str| {
            if let Some(seen) = first_mention.iter_mut().find(|(s, _, _)| *s == source) {
                if at < seen.1 {
                    (seen.1, seen.2) = (at, author.to_owned());
                }
            } else {
                first_mention.push((source, at, author.to_owned()));
            }
        };
        for other in self
            .issues
            .iter()
            .filter(|i| i.repo_id == repo_id && i.number != number)
        {
            if mentions(&other.body, number) || mentions(&other.title, number) {
                mention(other.number, other.created_at, &other.author);
            }
        }
        for c in self.comments.iter().filter(|c| {
            c.repo_id == repo_id && c.comment.number != number && mentions(&c.comment.body, number)
        }) {
            mention(c.comment.number, c.created_at, &c.comment.author);
        }
        for (source, at, author) in first_mention {
            let Some(issue) = self.issue(repo_id, source) else {
                continue;
            };
            let value = json!({
                "event": "cross-referenced",
                "actor": Model::user_json(&author),
                "created_at": iso8601(at),
                "updated_at": iso8601(at),
                "source": {"type": "issue", "issue": self.issue_json(issue)},
            });
            items.push((at, issue.id, value));
        }
        // `timeline-committed-event`: the git commit (`url` its
        // `git/commits/{sha}`), with `sha`, `html_url` and `parents`; no
        // `actor` (a commit has an author, not an actor).
        for c in commits {
            let git = &c["commit"];
            let mut verification = git["verification"].clone();
            verification["verified_at"] = Value::Null;
            let value = json!({
                "event": "committed",
                "sha": c["sha"],
                "node_id": c["node_id"],
                "url": git["url"],
                "html_url": c["html_url"],
                "author": git["author"],
                "committer": git["committer"],
                "tree": git["tree"],
                "message": git["message"],
                "parents": c["parents"],
                "verification": verification,
            });
            let at = git["committer"]["date"]
                .as_str()
                .and_then(crate::time::unix_from_iso8601)
                .unwrap_or(0);
            items.push((at, 0, value));
        }
        items.sort_by_key(|(at, id, _)| (*at, *id));
        items.into_iter().map(|(_, _, v)| v).collect()
    }
}

/// Whether `text` mentions issue `number` as `#number` (not part of a
/// longer number or word, GitHub's autolink).
fn mentions(text: &str, number: u64) -> bool {
    let needle = format!("#{number}");
    text.match_indices(&needle).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + needle.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '&')
            && !after.is_some_and(|c| c.is_ascii_digit() || c.is_alphabetic())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::github::model::PullInfo;

    #[test]
    fn events_carry_githubs_fields_per_kind() {
        let mut model = Model::new();
        let repo_id = model.add_repo("o", "r", "main");
        let n = model.add_issue(repo_id, "t", "", "alice", None, 1);
        for (kind, at) in [
            (EventKind::Labeled { name: "bug".into() }, 2),
            (EventKind::Closed, 3),
            (EventKind::Reopened, 4),
            (
                EventKind::Renamed {
                    from: "t".into(),
                    to: "u".into(),
                },
                5,
            ),
            (
                EventKind::Assigned {
                    assignee: "bob".into(),
                },
                6,
            ),
        ] {
            model.record_event(repo_id, n, "carol", kind, at);
        }
        let events = model.issue_events_json(repo_id, n);
        let names: Vec<&str> = events
            .iter()
            .map(|e| e["event"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["labeled", "closed", "reopened", "renamed", "assigned"]
        );
        for e in &events {
            for field in [
                "id",
                "node_id",
                "url",
                "actor",
                "commit_id",
                "commit_url",
                "created_at",
            ] {
                assert!(e.get(field).is_some(), "{field} in {e}");
            }
            assert_eq!(e["actor"]["login"], "carol");
        }
        assert_eq!(
            events[0]["label"],
            json!({"name": "bug", "color": "d73a4a"})
        );
        assert_eq!(events[1]["state_reason"], "completed");
        assert_eq!(events[2]["state_reason"], "reopened");
        assert_eq!(events[3]["rename"], json!({"from": "t", "to": "u"}));
        assert_eq!(events[4]["assignee"]["login"], "bob");
        assert_eq!(events[4]["assigner"]["login"], "carol");
        assert!(events[0]["url"]
            .as_str()
            .unwrap()
            .starts_with("https://api.github.com/repos/o/r/issues/events/"));
    }

    #[test]
    fn a_merge_names_its_commit_and_the_timeline_interleaves_by_time() {
        let mut model = Model::new();
        let repo_id = model.add_repo("o", "r", "main");
        let sha = "a".repeat(40);
        let pull = PullInfo::new("x", &sha, "main", &"b".repeat(40), false);
        let n = model.add_issue(repo_id, "t", "", "alice", Some(pull), 1);
        model.add_comment(
            CommentKind::Issue,
            repo_id,
            n,
            "hi",
            "bob",
            None,
            None,
            None,
            None,
            3,
        );
        model.reviews.push(crate::github::model::Review {
            id: 7,
            repo_id,
            number: n,
            author: "bob".into(),
            body: "ok".into(),
            state: "APPROVED".into(),
            submitted_at: 4,
        });
        model.record_event(
            repo_id,
            n,
            "alice",
            EventKind::ReviewRequested {
                reviewer: "bob".into(),
            },
            2,
        );
        model.record_event(
            repo_id,
            n,
            "alice",
            EventKind::Merged {
                commit_id: sha.clone(),
            },
            5,
        );
        model.record_event(repo_id, n, "alice", EventKind::Closed, 5);
        let timeline = model.timeline_json(repo_id, n, &[]);
        let names: Vec<&str> = timeline
            .iter()
            .map(|e| e["event"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "review_requested",
                "commented",
                "reviewed",
                "merged",
                "closed"
            ]
        );
        assert_eq!(timeline[0]["requested_reviewer"]["login"], "bob");
        assert_eq!(timeline[1]["actor"]["login"], "bob");
        assert_eq!(timeline[1]["body"], "hi");
        assert_eq!(timeline[2]["state"], "APPROVED");
        assert_eq!(timeline[2]["commit_id"], json!(sha));
        assert!(timeline[2]["_links"]["pull_request"]["href"].is_string());
        assert_eq!(timeline[3]["commit_id"], json!(sha));
        assert!(timeline[3]["commit_url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/commits/{sha}")));
        assert!(timeline[4]["state_reason"].is_null());
    }

    /// A pull request whose body says "Fixes #1" and a comment elsewhere
    /// naming #1 put `cross-referenced` in #1's timeline (once per source,
    /// at its first mention), not in its events; `#10`, `#1a` and `a#1`
    /// are not mentions of #1.
    #[test]
    fn mentions_elsewhere_are_cross_referenced_in_the_timeline() {
        let mut model = Model::new();
        let repo_id = model.add_repo("o", "r", "main");
        let issue = model.add_issue(repo_id, "It wobbles", "", "alice", None, 1);
        let pull = PullInfo::new("fix", &"a".repeat(40), "main", &"b".repeat(40), false);
        let pr = model.add_issue(repo_id, "Fix", "Fixes #1.", "bot", Some(pull), 2);
        let other = model.add_issue(repo_id, "Other", "see #10, #1a, a#1", "carol", None, 3);
        let comment = |model: &mut Model, on: u64, text: &str, who: &str, at: u64| {
            model.add_comment(
                CommentKind::Issue,
                repo_id,
                on,
                text,
                who,
                None,
                None,
                None,
                None,
                at,
            );
        };
        comment(&mut model, other, "also (#1)", "dave", 4);
        comment(&mut model, pr, "and #1 again", "bot", 5);
        comment(&mut model, issue, "#1 is this one", "alice", 6);
        let timeline = model.timeline_json(repo_id, issue, &[]);
        let crossed: Vec<(u64, &str, &str)> = timeline
            .iter()
            .filter(|e| e["event"] == "cross-referenced")
            .map(|e| {
                (
                    e["source"]["issue"]["number"].as_u64().unwrap(),
                    e["actor"]["login"].as_str().unwrap(),
                    e["source"]["type"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(crossed, [(pr, "bot", "issue"), (other, "dave", "issue")]);
        assert!(timeline
            .iter()
            .filter(|e| e["event"] == "cross-referenced")
            .all(|e| e["created_at"].is_string() && e["updated_at"].is_string()));
        assert!(model
            .issue_events_json(repo_id, issue)
            .iter()
            .all(|e| e["event"] != "cross-referenced"));
        assert!(mentions("Fixes #1.", 1) && mentions("#1", 1) && mentions("(#1)", 1));
        assert!(!mentions("#10", 1) && !mentions("#1a", 1) && !mentions("a#1", 1));
    }
}
