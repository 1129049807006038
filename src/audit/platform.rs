//! What the platforms say the bot account posted in a window, fetched
//! through the proxy with the router's own identities (rule set
//! `router-github`: the repository's issue and PR comments, review
//! comments, pull requests and their reviews). Parsing a page is pure;
//! fetching is at the edge.

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
}
