//! A stored delivery ─► a [`TriggerInput`] or a [`Skip`]: one function per
//! family of events (comments, reviews, opened, assignments, CI).

use serde_json::json;

use super::payload::{Envelope, Issue, Pull, User};
use super::{BotAccount, Mapped, Skip};
use crate::trigger::{Address, AddressKind, Sender, Source, TriggerInput, TriggerKind};

/// Where a trigger sits: the issue or pull request, or a branch (CI without
/// a pull request).
struct On {
    thread: String,
    labels: Vec<String>,
    branch: Option<String>,
}

/// What every trigger of one delivery shares.
struct Ctx<'a> {
    event: &'a str,
    delivery: &'a str,
    repo: &'a str,
    sender: Sender,
    bot: Option<&'a BotAccount>,
}

impl Ctx<'_> {
    fn issue(&self, i: &Issue) -> On {
        On {
            thread: format!("gh:{}#{}", self.repo, i.number),
            labels: i.labels.iter().map(|l| l.name.clone()).collect(),
            branch: None,
        }
    }

    fn pull(&self, p: &Pull) -> On {
        On {
            thread: format!("gh:{}#{}", self.repo, p.number),
            labels: p.labels.iter().map(|l| l.name.clone()).collect(),
            branch: Some(p.base.name.clone()),
        }
    }

    /// The bot's address when `text` mentions it.
    fn mentions(&self, text: &str) -> Vec<Address> {
        self.bot
            .filter(|b| b.mentioned_in(text))
            .map(|b| Address {
                kind: AddressKind::Mention,
                account: b.account(),
            })
            .into_iter()
            .collect()
    }

    /// The bot's address when `user` is the bot.
    fn names_bot(&self, kind: AddressKind, user: Option<&User>) -> Option<Vec<Address>> {
        let bot = self.bot?;
        user.filter(|u| bot.is(u)).map(|_| {
            vec![Address {
                kind,
                account: bot.account(),
            }]
        })
    }

    fn trigger(
        &self,
        kind: TriggerKind,
        on: On,
        message_id: String,
        addressed: Vec<Address>,
        text: String,
    ) -> Mapped {
        Mapped::Trigger(Box::new(TriggerInput {
            source: Source::Github,
            kind,
            thread: on.thread,
            message_id,
            sender: self.sender.clone(),
            addressed,
            chat: None,
            repo: Some(self.repo.to_owned()),
            labels: on.labels,
            branch: on.branch,
            text,
            head_ticket: None,
            pull_url: None,
            raw: Some(json!({ "github_delivery": self.delivery, "event": self.event })),
        }))
    }
}

fn sender_of(user: &User, via_app: bool) -> Sender {
    Sender {
        id: user.id.to_string(),
        login: Some(user.login.clone()),
        name: user.login.clone(),
        // An app acting for a person is still an app: at most a candidate.
        is_bot: user.kind == "Bot" || user.login.ends_with("[bot]") || via_app,
    }
}

/// Maps a stored delivery. `delivery` is the platform's delivery id; the
/// trigger's raw payload points at it.
pub fn map(
    event: &str,
    delivery: &str,
    body: &[u8],
    bot: Option<&BotAccount>,
) -> Result<Mapped, serde_json::Error> {
    let e: Envelope = serde_json::from_slice(body)?;
    let via_app = e
        .comment
        .as_ref()
        .is_some_and(|c| c.performed_via_github_app.is_some());
    let ctx = Ctx {
        event,
        delivery,
        repo: &e.repository.full_name,
        sender: sender_of(&e.sender, via_app),
        bot,
    };
    Ok(match event {
        "issue_comment" | "pull_request_review_comment" => comment(&ctx, &e),
        "pull_request_review" => review(&ctx, &e),
        "issues" | "pull_request" if e.action == "opened" => opened(&ctx, &e),
        "issues" | "pull_request" if e.action == "closed" => closed(&ctx, &e),
        "issues" | "pull_request" if e.action == "reopened" => reopened(&ctx, &e),
        "issues" | "pull_request" => assignment(&ctx, &e),
        "check_run" | "check_suite" | "workflow_run" => ci(&ctx, &e),
        _ => Mapped::Skip(Skip::NotMapped),
    })
}

fn comment(ctx: &Ctx<'_>, e: &Envelope) -> Mapped {
    match (&e.issue, &e.pull_request, &e.comment) {
        (Some(i), _, Some(c)) => {
            let kind = if i.pull_request.is_some() {
                TriggerKind::PullRequestComment
            } else {
                TriggerKind::IssueComment
            };
            let id = format!("ic_{}", c.id);
            ctx.trigger(
                kind,
                ctx.issue(i),
                id,
                ctx.mentions(&c.body),
                c.body.clone(),
            )
        }
        (None, Some(p), Some(c)) => {
            let id = format!("rc_{}", c.id);
            let addressed = ctx.mentions(&c.body);
            ctx.trigger(
                TriggerKind::ReviewComment,
                ctx.pull(p),
                id,
                addressed,
                c.body.clone(),
            )
        }
        _ => Mapped::Skip(Skip::NotMapped),
    }
}

fn review(ctx: &Ctx<'_>, e: &Envelope) -> Mapped {
    let (Some(p), Some(r)) = (&e.pull_request, &e.review) else {
        return Mapped::Skip(Skip::NotMapped);
    };
    let text = match r.body.as_deref().filter(|b| !b.is_empty()) {
        Some(b) => b.to_owned(),
        // GitHub wraps every review comment made on its own in a review of
        // its own, `COMMENTED` with no body: it says nothing its comment
        // does not, and would reach the thread twice.
        None if r.state.eq_ignore_ascii_case("commented") => {
            return Mapped::Skip(Skip::CommentsOnly)
        }
        None => format!("review: {}", r.state.to_lowercase()),
    };
    let addressed = ctx.mentions(&text);
    ctx.trigger(
        TriggerKind::Review,
        ctx.pull(p),
        format!("rv_{}", r.id),
        addressed,
        text,
    )
}

fn titled(title: &str, body: Option<&str>) -> String {
    match body.filter(|b| !b.is_empty()) {
        Some(b) => format!("{title}\n\n{b}"),
        None => title.to_owned(),
    }
}

fn opened(ctx: &Ctx<'_>, e: &Envelope) -> Mapped {
    let (kind, on, id, text) = match (&e.pull_request, &e.issue) {
        (Some(p), _) => (
            TriggerKind::PullRequestOpened,
            ctx.pull(p),
            format!("pr_{}", p.id),
            titled(&p.title, p.body.as_deref()),
        ),
        (None, Some(i)) => (
            TriggerKind::IssueOpened,
            ctx.issue(i),
            format!("is_{}", i.id),
            titled(&i.title, i.body.as_deref()),
        ),
        (None, None) => return Mapped::Skip(Skip::NotMapped),
    };
    let addressed = ctx.mentions(&text);
    ctx.trigger(kind, on, id, addressed, text)
}

/// Where the bot's workers push their work: `gatehouse/<ticket>`.
const WORK_BRANCH_PREFIX: &str = "gatehouse/";

/// An issue or pull request closed, or a pull request merged: a change of
/// state, with no text. A pull request the bot opened from a work branch
/// names the ticket it came from ([`TriggerInput::head_ticket`]); one that
/// anybody else opened names none, whatever its branch is called.
fn closed(ctx: &Ctx<'_>, e: &Envelope) -> Mapped {
    let (kind, on, id, head_ticket, pull_url) = match (&e.pull_request, &e.issue) {
        (Some(p), _) => {
            // By id only: a login can be renamed and taken by someone else.
            let by_bot = ctx
                .bot
                .is_some_and(|b| b.id.is_some() && p.user.as_ref().is_some_and(|u| b.is(u)));
            let head_ticket = p
                .head
                .as_ref()
                .and_then(|h| h.name.strip_prefix(WORK_BRANCH_PREFIX))
                .filter(|t| by_bot && !t.is_empty())
                .map(str::to_owned);
            let (kind, prefix) = if p.merged {
                (TriggerKind::PullRequestMerged, "pm")
            } else {
                (TriggerKind::PullRequestClosed, "pc")
            };
            let pull_url = head_ticket.as_ref().and(p.html_url.clone());
            (
                kind,
                ctx.pull(p),
                format!("{prefix}_{}", p.id),
                head_ticket,
                pull_url,
            )
        }
        (None, Some(i)) => (
            TriggerKind::IssueClosed,
            ctx.issue(i),
            format!("cl_{}", i.id),
            None,
            None,
        ),
        (None, None) => return Mapped::Skip(Skip::NotMapped),
    };
    let mut mapped = ctx.trigger(kind, on, id, Vec::new(), String::new());
    if let Mapped::Trigger(t) = &mut mapped {
        t.head_ticket = head_ticket;
        t.pull_url = pull_url;
    }
    mapped
}

/// An issue or pull request reopened: a resume signal, with no text. Its
/// id names the object; the meaning (placed by the update time) tells two
/// reopens of it apart.
fn reopened(ctx: &Ctx<'_>, e: &Envelope) -> Mapped {
    let (on, id) = match (&e.pull_request, &e.issue) {
        (Some(p), _) => (ctx.pull(p), p.id),
        (None, Some(i)) => (ctx.issue(i), i.id),
        (None, None) => return Mapped::Skip(Skip::NotMapped),
    };
    let kind = TriggerKind::Reopened;
    ctx.trigger(kind, on, format!("ro_{id}"), Vec::new(), String::new())
}

/// An issue or pull request assigned to the bot, or a review requested from
/// it. It has no message of its own; its id names the object and account.
fn assignment(ctx: &Ctx<'_>, e: &Envelope) -> Mapped {
    let (address, trigger, who, prefix) = match e.action.as_str() {
        "assigned" => (
            AddressKind::Assignment,
            TriggerKind::Assignment,
            e.assignee.as_ref(),
            "as",
        ),
        "review_requested" => (
            AddressKind::ReviewRequest,
            TriggerKind::ReviewRequest,
            e.requested_reviewer.as_ref(),
            "rr",
        ),
        _ => return Mapped::Skip(Skip::NotMapped),
    };
    let (on, object, title) = match (&e.pull_request, &e.issue) {
        (Some(p), _) => (ctx.pull(p), p.id, p.title.clone()),
        (None, Some(i)) => (ctx.issue(i), i.id, i.title.clone()),
        (None, None) => return Mapped::Skip(Skip::NotMapped),
    };
    match ctx.names_bot(address, who) {
        Some(addressed) => {
            let id = format!("{prefix}_{object}_{}", who.map_or(0, |u| u.id));
            ctx.trigger(trigger, on, id, addressed, title)
        }
        None => Mapped::Skip(Skip::NotTheBot),
    }
}

/// A finished CI run: information on its pull request's thread, or on the
/// branch's thread (`gh:owner/repo@branch`) when it ran for no pull request.
fn ci(ctx: &Ctx<'_>, e: &Envelope) -> Mapped {
    let (run, prefix) = match ctx.event {
        "check_run" => (e.check_run.as_ref(), "cr"),
        "check_suite" => (e.check_suite.as_ref(), "cs"),
        _ => (e.workflow_run.as_ref(), "wr"),
    };
    let Some(run) = run else {
        return Mapped::Skip(Skip::NotMapped);
    };
    let branch = run
        .head_branch
        .clone()
        .or_else(|| run.check_suite.as_ref().and_then(|s| s.head_branch.clone()));
    let text = format!(
        "CI {} {} on {}",
        run.name.as_deref().unwrap_or(ctx.event),
        run.conclusion.as_deref().unwrap_or("finished"),
        branch.as_deref().unwrap_or("an unknown branch"),
    );
    let thread = match (run.pull_requests.first(), &branch) {
        (Some(p), _) => format!("gh:{}#{}", ctx.repo, p.number),
        (None, Some(b)) => format!("gh:{}@{b}", ctx.repo),
        (None, None) => return Mapped::Skip(Skip::NoPlace),
    };
    let on = On {
        thread,
        labels: Vec::new(),
        branch,
    };
    let id = format!("{prefix}_{}", run.id);
    ctx.trigger(TriggerKind::CiResult, on, id, Vec::new(), text)
}
