#!/bin/sh
# aider (https://aider.chat, the unmodified `aider-chat` package from PyPI)
# as a ticket's worker. `scripts/install-aider` installs both: aider in a
# virtual environment and this script as `gatehouse-aider-worker` beside it.
# It runs inside the ticket's sandbox with no credential: the model calls
# go to the model API's host through the proxy, which holds the key (rule
# set `model-api`); the clone, push and pull request go to GitHub through
# the proxy (rule set `github-worker`).
#
#   1. read the task from the prompt ($GATEHOUSE_PROMPT, after "# Your task")
#      and report `working`;
#   2. clone $GH_REPO and branch gatehouse/<ticket> (a ticket's later job
#      continues the clone and the branch in its work dir);
#   3. let aider make the change and commit it (`aider --message`, which runs
#      one request and exits);
#   4. push the branch, open a pull request (REST, through the proxy), or
#      find the branch's open one, and report `ready` with its link; a run
#      that changed nothing is reported `blocked` with a question, so a
#      person can say more.
#
# The model and its endpoint come from aider's own settings in the
# environment (set them in the team profile's [env.set]): AIDER_MODEL
# (e.g. `openai/gpt-4.1`), OPENAI_API_BASE (the API's real host; the
# proxy routes it) and OPENAI_API_KEY (a placeholder: the proxy drops
# the client's credential and injects the real one). Extra aider flags may
# be given in AIDER_WORKER_ARGS.
set -eu

say() { printf 'aider-worker: %s\n' "$*" >&2; }
fail() { say "$*"; exit 1; }

ticket=${GATEHOUSE_TICKET:?not running as a gatehouse job}
repo=${GH_REPO:?the job names no repository}
prompt=${GATEHOUSE_PROMPT:?no prompt}
branch="gatehouse/$ticket"
command -v aider >/dev/null || fail "aider is not on PATH"

task=$(sed -n '/^# Your task$/,$p' "$prompt" | sed '1,2d')
[ -n "$task" ] || fail "the prompt holds no task"
title=$(printf '%s\n' "$task" | sed -n '1{s/[[:space:]]\{1,\}/ /g;p;}' | cut -c1-72)
gatehouse report --state working --summary "Working on: $title" >/dev/null

# A ticket's later job (a follow-up, a resume) runs in the same work dir:
# it continues the clone and the branch the first job left.
if [ -d repo/.git ]; then
    git -C repo fetch -q origin || fail "cannot fetch $repo"
else
    git clone -q "https://github.com/$repo.git" repo || fail "cannot clone $repo"
fi
cd repo
base=$(git symbolic-ref --short refs/remotes/origin/HEAD | sed 's#^origin/##')
git config user.name "gatehouse worker (aider)"
git config user.email "worker@gatehouse.invalid"
if git rev-parse -q --verify "refs/heads/$branch" >/dev/null; then
    git checkout -q "$branch"
elif git rev-parse -q --verify "refs/remotes/origin/$branch" >/dev/null; then
    git checkout -q -b "$branch" "origin/$branch"
else
    git checkout -q -b "$branch"
fi
start=$(git rev-parse HEAD)

# One request, answered without asking anyone: the worker has no terminal
# and no person to ask (questions go through `gatehouse report`). No update
# check and no analytics: the proxy would refuse those hosts anyway.
run_aider() {
    # shellcheck disable=SC2086 # AIDER_WORKER_ARGS is a list of flags
    aider --yes-always --no-pretty --no-fancy-input --no-check-update --no-analytics \
        --no-show-model-warnings --no-gitignore ${AIDER_WORKER_ARGS:-} \
        --message "$1" >&2 || fail "aider failed"
}

# Prints a field of the JSON line `gatehouse inbox` printed (the gist: an
# escaped quote inside the text stays escaped).
field() { sed -n "s/.*\"$1\":\"\\([^\"]*\\)\".*/\\1/p" | head -n 1; }

# A run that changes nothing asks, once, what should change; the answer
# (a message in the inbox) is the next request to aider.
run_aider "$task"
if [ "$(git rev-parse HEAD)" = "$start" ]; then
    gatehouse report --state blocked --summary "aider made no change for: $title" \
        --question "aider made no change. What exactly should change, and in which file?" >/dev/null
    message=$(gatehouse inbox --wait) || fail "cannot read the inbox"
    task=$(printf '%s\n' "$message" | field text)
    answers=$(printf '%s\n' "$message" | field trigger)
    [ -n "$task" ] || fail "the message holds no text"
    gatehouse report --state working --summary "Working on: $title" --answers "$answers" >/dev/null
    run_aider "$task"
    [ "$(git rev-parse HEAD)" != "$start" ] || fail "aider made no change"
fi

git push -q origin "HEAD:refs/heads/$branch" || fail "cannot push $branch"
subject=$(git log -1 --format=%s)
# The branch's open pull request, if a previous job opened it (GitHub
# filters `head` only in the `owner:branch` form).
url=$(gh api "repos/$repo/pulls?state=open&head=${repo%%/*}:$branch" \
    --jq "map(select(.head.ref == \"$branch\")) | .[0].html_url // empty") \
    || fail "cannot look up the pull request of $branch"
summary="Updated its pull request: $title"
if [ -z "$url" ]; then
    url=$(gh api "repos/$repo/pulls" -f title="$title" -f head="$branch" -f base="$base" \
        -f body="Ticket $ticket, made by aider: $subject" --jq .html_url) \
        || fail "cannot open a pull request"
    summary="Opened a pull request: $title"
fi
gatehouse report --state ready --summary "$summary" --link "$url" >/dev/null
say "ready: $url"
