//! What the platforms say the bot account posted in a window, fetched
//! through the proxy with the router's own identities (rule set
//! `router-github`: the repository's issue and PR comments, review
//! comments, pull requests and their reviews; `router-feishu`: the chats
//! the bot is in, their messages and their threads' messages). Parsing a
//! page is pure; fetching is at the edge.

use std::time::Duration;

use anyhow::{bail, Context};
use gatehouse_router::live::config::RouterConfig;
use gatehouse_router::live::http::ProxyClient;
use http::Method;
use serde_json::Value;

use super::model::PlatformMessage;
use super::sources::rfc3339_ms;

/// What a GitHub listing lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GithubList {
    /// `GET /repos/{repo}/issues/comments` (issue and PR conversation comments).
    IssueComments,
    /// `GET /repos/{repo}/pulls/comments` (review comments and their replies).
    ReviewComments,
    /// `GET /repos/{repo}/pulls?state=all`.
    Pulls,
    /// `GET /repos/{repo}/pulls/{n}/reviews`.
    Reviews,
}

/// The bot's messages on one page of a GitHub listing, created at or after
/// `since_ms` (ms). Errors when the page is not a list.
pub fn github_page(
    list: GithubList,
    repo: &str,
    page: &[u8],
    login: &str,
    since_ms: u64,
) -> anyhow::Result<Vec<PlatformMessage>> {
    let items: Vec<Value> = serde_json::from_slice(page).context("a GitHub listing page")?;
    let mut out = Vec::new();
    for item in &items {
        if item["user"]["login"].as_str() != Some(login) {
            continue;
        }
        let id = match &item["id"] {
            Value::Number(n) => n.to_string(),
            Value::String(s) => s.clone(),
            _ => continue,
        };
        let (key, time) = match list {
            GithubList::IssueComments => (format!("github:comment:{id}"), "created_at"),
            GithubList::ReviewComments => (format!("github:review_comment:{id}"), "created_at"),
            GithubList::Pulls => (
                format!("github:pull:{repo}#{}", item["number"]),
                "created_at",
            ),
            GithubList::Reviews => (format!("github:review:{id}"), "submitted_at"),
        };
        let at = item[time].as_str().and_then(rfc3339_ms).unwrap_or(0);
        if at < since_ms {
            continue;
        }
        out.push(PlatformMessage {
            key,
            at,
            place: item["html_url"].as_str().unwrap_or_default().to_owned(),
        });
    }
    Ok(out)
}

/// Pull request numbers on a page of `GET /repos/{repo}/pulls`.
pub fn pull_numbers(page: &[u8]) -> Vec<u64> {
    serde_json::from_slice::<Vec<Value>>(page)
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p["number"].as_u64())
        .collect()
}

const PER_PAGE: usize = 100;
/// Most pages read of one listing (100 items each).
const MAX_PAGES: usize = 1000;
const TIMEOUT: Duration = Duration::from_secs(30);

/// Every page of a listing through `socket` (the router's identity).
async fn pages(
    client: &ProxyClient,
    socket: &std::path::Path,
    path: &str,
) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for page in 1..=MAX_PAGES {
        let sep = if path.contains('?') { '&' } else { '?' };
        let url = format!("{path}{sep}per_page={PER_PAGE}&page={page}");
        let answer = client
            .request(socket, "api.github.com", Method::GET, &url, None, TIMEOUT)
            .await
            .map_err(|e| anyhow::anyhow!("GET {url} through the router's identity: {e}"))?;
        if !answer.status.is_success() {
            bail!(
                "GET {url} through the router's identity: {} {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
                    .chars()
                    .take(300)
                    .collect::<String>()
            );
        }
        let n = serde_json::from_slice::<Vec<Value>>(&answer.body)
            .map(|v| v.len())
            .unwrap_or(0);
        out.push(answer.body.to_vec());
        if n < PER_PAGE {
            return Ok(out);
        }
    }
    bail!("{path}: more than {MAX_PAGES} pages")
}

/// The bot's GitHub messages since `since_ms` in every repository the
/// router's config names, fetched through its identities.
pub fn fetch_github(
    config: &RouterConfig,
    login: &str,
    since_ms: u64,
) -> anyhow::Result<Vec<PlatformMessage>> {
    let client = ProxyClient::new(&config.proxy.ca_cert)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // The platform keeps seconds; `:` percent-encoded in the query.
    let since = gatehouse_proxy::audit::rfc3339_utc(since_ms / 1000 * 1000).replace(':', "%3A");
    runtime.block_on(async {
        let mut out = Vec::new();
        for (repo, socket) in &config.proxy.github_sockets {
            let lists = [
                (
                    GithubList::IssueComments,
                    format!("/repos/{repo}/issues/comments?since={since}"),
                ),
                (
                    GithubList::ReviewComments,
                    format!("/repos/{repo}/pulls/comments?since={since}"),
                ),
                (GithubList::Pulls, format!("/repos/{repo}/pulls?state=all")),
            ];
            let mut numbers = Vec::new();
            for (list, path) in lists {
                for page in pages(&client, socket, &path).await? {
                    out.extend(github_page(list, repo, &page, login, since_ms)?);
                    if list == GithubList::Pulls {
                        numbers.extend(pull_numbers(&page));
                    }
                }
            }
            for n in numbers {
                let path = format!("/repos/{repo}/pulls/{n}/reviews");
                for page in pages(&client, socket, &path).await? {
                    out.extend(github_page(
                        GithubList::Reviews,
                        repo,
                        &page,
                        login,
                        since_ms,
                    )?);
                }
            }
        }
        Ok(out)
    })
}

/// The app's messages on one page of `GET /open-apis/im/v1/messages`, and
/// the next page's token (if there is more). Errors on an error answer.
pub fn feishu_messages_page(
    page: &[u8],
    app_id: &str,
    since_ms: u64,
) -> anyhow::Result<(Vec<PlatformMessage>, Option<String>)> {
    let v: Value = serde_json::from_slice(page).context("a Feishu listing page")?;
    if v["code"].as_i64() != Some(0) {
        bail!("Feishu answered code {}: {}", v["code"], v["msg"]);
    }
    let mut out = Vec::new();
    for m in v["data"]["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        let sender = &m["sender"];
        if sender["sender_type"] != "app" || sender["id"].as_str() != Some(app_id) {
            continue;
        }
        let (Some(id), Some(at)) = (
            m["message_id"].as_str(),
            m["create_time"]
                .as_str()
                .and_then(|t| t.parse::<u64>().ok()),
        ) else {
            continue;
        };
        if at < since_ms {
            continue;
        }
        out.push(PlatformMessage {
            key: format!("feishu:message:{id}"),
            at,
            place: format!("chat {}", m["chat_id"].as_str().unwrap_or_default()),
        });
    }
    Ok((out, next_token(&v)))
}

/// The threads (`omt_…`) of the messages on a Feishu history page. A chat's
/// history shows a thread by its first message only; the thread's replies
/// are listed with `container_id_type=thread` (Feishu's "List messages").
/// Ids that are not one path segment of id characters are left out.
pub fn feishu_threads(page: &[u8]) -> Vec<String> {
    let Ok(v) = serde_json::from_slice::<Value>(page) else {
        return Vec::new();
    };
    let mut threads: Vec<String> = v["data"]["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .filter_map(|m| m["thread_id"].as_str())
        .filter(|t| {
            !t.is_empty()
                && t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
        .map(str::to_owned)
        .collect();
    threads.dedup();
    threads
}

/// The chat ids on one page of `GET /open-apis/im/v1/chats`, and the next
/// page's token.
pub fn feishu_chats_page(page: &[u8]) -> anyhow::Result<(Vec<String>, Option<String>)> {
    let v: Value = serde_json::from_slice(page).context("a Feishu listing page")?;
    if v["code"].as_i64() != Some(0) {
        bail!("Feishu answered code {}: {}", v["code"], v["msg"]);
    }
    let chats = v["data"]["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[])
        .iter()
        .filter_map(|c| c["chat_id"].as_str().map(str::to_owned))
        .collect();
    Ok((chats, next_token(&v)))
}

fn next_token(v: &Value) -> Option<String> {
    (v["data"]["has_more"] == true)
        .then(|| v["data"]["page_token"].as_str().map(str::to_owned))
        .flatten()
        .filter(|t| !t.is_empty())
}

/// Every page of a Feishu listing through `socket`, each handed to `each`,
/// which returns the next page's token.
async fn feishu_pages(
    client: &ProxyClient,
    socket: &std::path::Path,
    path: &str,
    mut each: impl FnMut(&[u8]) -> anyhow::Result<Option<String>>,
) -> anyhow::Result<()> {
    let mut token: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let url = match &token {
            Some(t) => format!("{path}&page_token={t}"),
            None => path.to_owned(),
        };
        let answer = client
            .request(socket, "open.feishu.cn", Method::GET, &url, None, TIMEOUT)
            .await
            .map_err(|e| anyhow::anyhow!("GET {url} through the router's identity: {e}"))?;
        if !answer.status.is_success() {
            bail!("GET {url} through the router's identity: {}", answer.status);
        }
        token = each(&answer.body)?;
        if token.is_none() {
            return Ok(());
        }
    }
    bail!("{path}: more than {MAX_PAGES} pages")
}

/// The app's Feishu messages since `since_ms` in every chat the bot is in,
/// fetched through the router's Feishu identity.
pub fn fetch_feishu(config: &RouterConfig, since_ms: u64) -> anyhow::Result<Vec<PlatformMessage>> {
    let (Some(socket), Some(feishu)) = (&config.proxy.feishu_socket, &config.feishu) else {
        bail!("the router's config has no Feishu identity and app");
    };
    let client = ProxyClient::new(&config.proxy.ca_cert)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let mut chats = Vec::new();
        feishu_pages(&client, socket, "/open-apis/im/v1/chats?page_size=100", |page| {
            let (more, next) = feishu_chats_page(page)?;
            chats.extend(more);
            Ok(next)
        })
        .await?;
        let mut out = Vec::new();
        let mut threads = Vec::new();
        for chat in chats {
            let path = format!(
                "/open-apis/im/v1/messages?container_id_type=chat&container_id={chat}&start_time={}&page_size=50",
                since_ms / 1000
            );
            feishu_pages(&client, socket, &path, |page| {
                let (more, next) = feishu_messages_page(page, &feishu.app_id, since_ms)?;
                out.extend(more);
                threads.extend(feishu_threads(page));
                Ok(next)
            })
            .await?;
        }
        // A thread's replies (the bot's among them) are not in its chat's history.
        threads.sort_unstable();
        threads.dedup();
        for thread in threads {
            let path = format!(
                "/open-apis/im/v1/messages?container_id_type=thread&container_id={thread}&page_size=50"
            );
            feishu_pages(&client, socket, &path, |page| {
                let (more, next) = feishu_messages_page(page, &feishu.app_id, since_ms)?;
                out.extend(more);
                Ok(next)
            })
            .await?;
        }
        // A thread's first message is listed in its chat and in the thread.
        let mut seen = std::collections::HashSet::new();
        out.retain(|m| seen.insert(m.key.clone()));
        Ok(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_keep_the_bots_messages_in_the_window() {
        let page = br#"[
          {"id": 7, "user": {"login": "bot"}, "created_at": "2026-12-01T00:00:10Z", "html_url": "u7"},
          {"id": 8, "user": {"login": "alice"}, "created_at": "2026-12-01T00:00:10Z", "html_url": "u8"},
          {"id": 9, "user": {"login": "bot"}, "created_at": "2026-12-01T00:00:01Z", "html_url": "u9"}
        ]"#;
        let since = rfc3339_ms("2026-12-01T00:00:05Z").unwrap();
        let got = github_page(GithubList::IssueComments, "o/r", page, "bot", since).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].key, "github:comment:7");
        assert_eq!(got[0].place, "u7");
        let pulls = br#"[{"id": 100, "number": 3, "user": {"login": "bot"}, "created_at": "2026-12-01T00:00:10Z"}]"#;
        let got = github_page(GithubList::Pulls, "o/r", pulls, "bot", since).unwrap();
        assert_eq!(got[0].key, "github:pull:o/r#3");
        assert_eq!(pull_numbers(pulls), vec![3]);
        let reviews =
            br#"[{"id": 5, "user": {"login": "bot"}, "submitted_at": "2026-12-01T00:00:10Z"}]"#;
        let got = github_page(GithubList::Reviews, "o/r", reviews, "bot", since).unwrap();
        assert_eq!(got[0].key, "github:review:5");
        assert!(github_page(GithubList::Reviews, "o/r", b"{}", "bot", 0).is_err());
    }

    #[test]
    fn feishu_pages_keep_the_apps_messages_and_follow_the_token() {
        let page = br#"{"code": 0, "data": {"has_more": true, "page_token": "50", "items": [
          {"message_id": "om_1", "chat_id": "oc_1", "create_time": "1796000001000",
           "sender": {"id": "cli_app", "id_type": "app_id", "sender_type": "app"}},
          {"message_id": "om_2", "chat_id": "oc_1", "create_time": "1796000002000",
           "sender": {"id": "ou_alice", "id_type": "open_id", "sender_type": "user"}},
          {"message_id": "om_3", "chat_id": "oc_1", "create_time": "1796000003000",
           "sender": {"id": "cli_other", "id_type": "app_id", "sender_type": "app"}},
          {"message_id": "om_4", "chat_id": "oc_1", "create_time": "1795000000000",
           "sender": {"id": "cli_app", "id_type": "app_id", "sender_type": "app"}}
        ]}}"#;
        let (got, next) = feishu_messages_page(page, "cli_app", 1_796_000_000_000).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].key, "feishu:message:om_1");
        assert_eq!(got[0].at, 1_796_000_001_000);
        assert_eq!(next.as_deref(), Some("50"));
        let last = br#"{"code": 0, "data": {"has_more": false, "page_token": "", "items": [{"chat_id": "oc_9"}]}}"#;
        assert_eq!(
            feishu_chats_page(last).unwrap(),
            (vec!["oc_9".to_owned()], None)
        );
        let refused = br#"{"code": 99991663, "msg": "invalid token"}"#;
        assert!(feishu_messages_page(refused, "cli_app", 0).is_err());
    }

    #[test]
    fn feishu_threads_are_found_on_a_history_page() {
        let page = br#"{"code": 0, "data": {"has_more": false, "page_token": "", "items": [
          {"message_id": "om_1", "thread_id": ""},
          {"message_id": "om_2", "thread_id": "omt_a"},
          {"message_id": "om_3"},
          {"message_id": "om_4", "thread_id": "omt_b"},
          {"message_id": "om_5", "thread_id": "omt_x&container_id_type=chat"}
        ]}}"#;
        assert_eq!(feishu_threads(page), ["omt_a", "omt_b"]);
        assert!(feishu_threads(b"not json").is_empty());
    }
}
