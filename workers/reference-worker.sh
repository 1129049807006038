#!/bin/sh
# gatehouse's reference worker: a small, real change done the way a coding
# agent would do it, with nothing but `git`, `gh` and `gatehouse report`.
# It runs inside a ticket's sandbox (`gatehouse reference-worker` runs this
# script, embedded in the binary), holds no credential and talks to nobody:
# it reports, and the router speaks to people.
#
#   1. read the task from the prompt ($GATEHOUSE_PROMPT, after "# Your task");
#   2. a task that asks a question is not something it can answer: it
#      reports `blocked` with a question and waits for a message in its
#      inbox, which becomes the task (its next report answers that message);
#   3. clone $GH_REPO, commit a note of the task on gatehouse/<ticket>, push;
#      a ticket's later job finds the clone in its work dir and continues
#      the branch;
#   4. open a pull request (REST, through the proxy), or find the branch's
#      open one, and report `ready` with its link. With $GATEHOUSE_FORK (the team delivers from the bot's fork,
#      rule set github-worker-fork) the branch is pushed to the fork and the
#      pull request opened from it (`head = <fork owner>:<branch>`).
# Messages that reach its inbox while it works (a CI result, a person's
# follow-up) are shown on stderr; they change nothing. Stopping is the
# router's to decide: a person's "stop" cancels the job from outside, and a
# bot cannot stop it at all.
#
# For demonstrations only: with GATEHOUSE_WORKER_PROBE_REPO=<owner/name> it
# first tries two things its rules forbid, a push to the default branch and
# a comment in that other repository, and says on stderr that both were
# refused (the proxy's audit log has the refusals).
set -eu

say() { printf 'reference-worker: %s\n' "$*" >&2; }
fail() { say "$*"; exit 1; }

ticket=${GATEHOUSE_TICKET:?not running as a gatehouse job}
repo=${GH_REPO:?the job names no repository}
prompt=${GATEHOUSE_PROMPT:?no prompt}
branch="gatehouse/$ticket"

# The task is everything after the "# Your task" heading.
task=$(sed -n '/^# Your task$/,$p' "$prompt" | sed '1,2d')
[ -n "$task" ] || fail "the prompt holds no task"

# Prints the text (or the trigger id) of the first JSON line `gatehouse
# inbox` printed. Escaped quotes inside the text are kept escaped: the
# worker only needs the gist.
field() { sed -n "s/.*\"$1\":\"\\([^\"]*\\)\".*/\\1/p" | head -n 1; }

# Checks out the ticket's branch: the local one a previous job made, else
# the one on the remote, else a new one from the default branch.
continue_branch() {
    if git rev-parse -q --verify "refs/heads/$branch" >/dev/null; then
        git checkout -q "$branch"
    elif git rev-parse -q --verify "refs/remotes/origin/$branch" >/dev/null; then
        git checkout -q -b "$branch" "origin/$branch"
    else
        git checkout -q -b "$branch"
    fi
}

# Prints the html_url of the open pull request from `owner:branch` ($1),
# or nothing. GitHub filters `head` only in that form.
open_pull_request() {
    gh api "repos/$repo/pulls?state=open&head=$1" \
        --jq "map(select(.head.ref == \"$branch\")) | .[0].html_url // empty"
}

show_inbox() {
    gatehouse inbox | while IFS= read -r line; do say "inbox: $line"; done
}

answers=""
case "$task" in
*'?'*)
    question="I make small changes and cannot answer questions. Which change should I make?"
    gatehouse report --state blocked --summary "Waiting for a decision: the task asks a question." \
        --question "$question" >/dev/null
    message=$(gatehouse inbox --wait) || fail "cannot read the inbox"
    task=$(printf '%s\n' "$message" | field text)
    answers=$(printf '%s\n' "$message" | field trigger)
    [ -n "$task" ] || fail "the message holds no text"
    ;;
esac

# The first line of the task, shortened, is the title.
title=$(printf '%s\n' "$task" | sed -n '1{s/[[:space:]]\{1,\}/ /g;p;}' | cut -c1-72)
set -- --state working --summary "Working on: $title"
[ -z "$answers" ] || set -- "$@" --answers "$answers"
gatehouse report "$@" >/dev/null

# A ticket's later job (a follow-up, a resume) runs in the same work dir:
# it continues the clone and the branch the first job left.
if [ -d repo/.git ]; then
    git -C repo fetch -q origin || fail "cannot fetch $repo"
else
    git clone -q "https://github.com/$repo.git" repo || fail "cannot clone $repo"
fi
cd repo
base=$(git symbolic-ref --short refs/remotes/origin/HEAD | sed 's#^origin/##')
git config user.name "gatehouse worker"
git config user.email "worker@gatehouse.invalid"

continue_branch
mkdir -p gatehouse
printf '%s\n' "$task" >> "gatehouse/$ticket.md"
git add "gatehouse/$ticket.md"
git commit -q -m "$title" -m "Ticket $ticket."

if [ -n "${GATEHOUSE_WORKER_PROBE_REPO:-}" ]; then
    # The new commit, so the push is not a no-op that never asks the server.
    if git push -q origin "HEAD:refs/heads/$base" 2>/dev/null; then
        fail "a push to $base was allowed"
    fi
    say "a push to $base was refused"
    if gh api "repos/$GATEHOUSE_WORKER_PROBE_REPO/issues/1/comments" -f body="probe" >/dev/null 2>&1; then
        fail "a comment in $GATEHOUSE_WORKER_PROBE_REPO was allowed"
    fi
    say "a comment in $GATEHOUSE_WORKER_PROBE_REPO was refused"
fi

show_inbox
head="$branch"
if [ -n "${GATEHOUSE_FORK:-}" ]; then
    git push -q "https://github.com/$GATEHOUSE_FORK.git" "HEAD:refs/heads/$branch" \
        || fail "cannot push $branch to the fork $GATEHOUSE_FORK"
    head="${GATEHOUSE_FORK%%/*}:$branch"
else
    git push -q origin "HEAD:refs/heads/$branch" || fail "cannot push $branch"
fi

show_inbox
owner=${GATEHOUSE_FORK:-$repo}
url=$(open_pull_request "${owner%%/*}:$branch") || fail "cannot look up the pull request of $head"
summary="Opened a pull request: $title"
if [ -n "$url" ]; then
    say "the branch's pull request is already open: $url"
    summary="Updated its pull request: $title"
else
    url=$(gh api "repos/$repo/pulls" -f title="$title" -f head="$head" -f base="$base" \
        -f body="Ticket $ticket: a note of the task in gatehouse/$ticket.md." --jq .html_url) \
        || fail "cannot open a pull request"
fi
gatehouse report --state ready --summary "$summary" --link "$url" >/dev/null
say "ready: $url"
