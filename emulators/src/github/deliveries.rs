//! The App's webhook deliveries, as GitHub lists them and redelivers them:
//! `GET /app/hook/deliveries` and `POST /app/hook/deliveries/{id}/attempts`
//! (REST description, `apps/list-webhook-deliveries`,
//! `apps/redeliver-webhook-delivery`), both authenticated with the App JWT.
//!
//! Each attempt is one item (a redelivery is a new item with the same
//! `guid` and `redelivery: true`); a delivery the emulator was told to drop
//! is an item that failed. Items come newest first, `per_page` at most 100
//! (default 30), and pages continue by cursor ("This endpoint supports
//! cursor pagination": `Link: <…?cursor=…>; rel="next"`).

use http::{Method, StatusCode};
use serde_json::{json, Value};

use super::rest::Reply;
use super::webhooks::{WebhookDelivery, Webhooks};
use crate::record::lock;
use crate::time::iso8601;

/// The id of the first logged attempt (GitHub's are large integers).
pub(super) const FIRST_ID: u64 = 12_000_000_001;

/// One attempt, as the deliveries list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attempt {
    pub id: u64,
    pub guid: String,
    pub event: String,
    pub action: Option<String>,
    pub redelivery: bool,
    /// 0 when nothing answered.
    pub status_code: u16,
    pub status: String,
    pub delivered_at: u64,
    pub repository_id: Option<u64>,
}

impl Attempt {
    pub(super) fn new(
        id: u64,
        d: &WebhookDelivery,
        result: Result<u16, String>,
        redelivery: bool,
        now: u64,
    ) -> Self {
        let (status_code, status) = match result {
            Ok(code) if (200..300).contains(&code) => (code, "OK".to_owned()),
            Ok(code) => (code, format!("Invalid HTTP Response: {code}")),
            Err(_) => (0, "failed to connect to host".to_owned()),
        };
        let repository_id = serde_json::from_slice::<Value>(&d.body)
            .ok()
            .and_then(|v| v["repository"]["id"].as_u64());
        Self {
            id,
            guid: d.guid.clone(),
            event: d.event.clone(),
            action: d.action.clone(),
            redelivery,
            status_code,
            status,
            delivered_at: now,
            repository_id,
        }
    }

    fn json(&self, installation_id: u64) -> Value {
        json!({
            "id": self.id,
            "guid": self.guid,
            "delivered_at": iso8601(self.delivered_at),
            "redelivery": self.redelivery,
            "duration": 0.01,
            "status": self.status,
            "status_code": self.status_code,
            "event": self.event,
            "action": self.action,
            "installation_id": installation_id,
            "repository_id": self.repository_id,
            "throttled_at": null,
        })
    }
}

/// One page of `log` (oldest first) newest first: the items with ids below
/// `cursor`, at most `per_page`, and the cursor of the next page if any.
fn page(log: &[Attempt], cursor: Option<u64>, per_page: usize) -> (Vec<&Attempt>, Option<u64>) {
    let below: Vec<&Attempt> = log
        .iter()
        .rev()
        .filter(|a| cursor.is_none_or(|c| a.id < c))
        .collect();
    let next = (below.len() > per_page).then(|| below[per_page - 1].id);
    (below.into_iter().take(per_page).collect(), next)
}

/// `cursor` values: `v1_{id}`.
fn parse_cursor(text: &str) -> Option<u64> {
    text.strip_prefix("v1_")?.parse().ok()
}

/// Serves `/app/hook/…` (the caller checked the App JWT): the reply and
/// the `Link` header of a list with more pages.
pub(super) fn serve(
    webhooks: &Webhooks,
    installation_id: u64,
    method: &Method,
    segments: &[&str],
    query: &[(String, String)],
    link_base: &str,
) -> (Reply, Option<String>) {
    let param = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    match (method, segments) {
        (&Method::GET, ["deliveries"]) => {
            let per_page = match param("per_page").map(str::parse::<usize>) {
                None => 30,
                Some(Ok(n)) if (1..=100).contains(&n) => n,
                Some(_) => {
                    return (
                        Reply::error(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            "per_page must be between 1 and 100",
                        ),
                        None,
                    )
                }
            };
            let cursor = match param("cursor").map(parse_cursor) {
                None => None,
                Some(Some(c)) => Some(c),
                Some(None) => {
                    return (
                        Reply::error(StatusCode::BAD_REQUEST, "Invalid cursor"),
                        None,
                    )
                }
            };
            let log = lock(&webhooks.log);
            let (items, next) = page(&log, cursor, per_page);
            let body: Vec<Value> = items.iter().map(|a| a.json(installation_id)).collect();
            let link = next.map(|c| {
                format!("<{link_base}/app/hook/deliveries?per_page={per_page}&cursor=v1_{c}>; rel=\"next\"")
            });
            (ok(Value::Array(body)), link)
        }
        (&Method::POST, ["deliveries", id, "attempts"]) => {
            let guid = id.parse::<u64>().ok().and_then(|id| webhooks.guid_of(id));
            let Some(guid) = guid else {
                return (Reply::error(StatusCode::NOT_FOUND, "Not Found"), None);
            };
            // GitHub answers 202 and delivers later; the emulator delivers
            // first (a blocking send), so a test sees the attempt when the
            // call returns.
            let _ = tokio::task::block_in_place(|| webhooks.redeliver(&guid));
            let mut reply = ok(json!({}));
            reply.status = StatusCode::ACCEPTED;
            (reply, None)
        }
        _ => (Reply::error(StatusCode::NOT_FOUND, "Not Found"), None),
    }
}

fn ok(body: Value) -> Reply {
    Reply {
        status: StatusCode::OK,
        body,
        created_id: None,
        location: None,
        pages: None,
        media: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(id: u64) -> Attempt {
        Attempt {
            id,
            guid: format!("g{id}"),
            event: "issues".into(),
            action: Some("opened".into()),
            redelivery: false,
            status_code: 200,
            status: "OK".into(),
            delivered_at: 0,
            repository_id: None,
        }
    }

    #[test]
    fn pages_go_newest_first_by_cursor() {
        let log: Vec<Attempt> = (1..=5).map(attempt).collect();
        let ids = |items: Vec<&Attempt>| items.iter().map(|a| a.id).collect::<Vec<_>>();
        let (items, next) = page(&log, None, 2);
        assert_eq!((ids(items), next), (vec![5, 4], Some(4)));
        let (items, next) = page(&log, Some(4), 2);
        assert_eq!((ids(items), next), (vec![3, 2], Some(2)));
        let (items, next) = page(&log, Some(2), 2);
        assert_eq!((ids(items), next), (vec![1], None));
        let (items, next) = page(&log, None, 5);
        assert_eq!((ids(items).len(), next), (5, None));
        assert_eq!(page(&[], None, 30).0.len(), 0);
        assert_eq!(parse_cursor("v1_12"), Some(12));
        assert_eq!(parse_cursor("12"), None);
    }

    #[test]
    fn attempts_say_what_happened() {
        let d = WebhookDelivery {
            guid: "g".into(),
            event: "issue_comment".into(),
            action: Some("created".into()),
            url: "http://127.0.0.1:1/".into(),
            body: br#"{"repository":{"id":100001}}"#.to_vec(),
            attempts: Vec::new(),
        };
        let ok = Attempt::new(1, &d, Ok(202), false, 0);
        assert_eq!((ok.status_code, ok.status.as_str()), (202, "OK"));
        assert_eq!(ok.repository_id, Some(100_001));
        let refused = Attempt::new(2, &d, Ok(503), true, 0);
        assert_eq!(refused.status, "Invalid HTTP Response: 503");
        let dropped = Attempt::new(3, &d, Err("dropped".into()), false, 0);
        assert_eq!(dropped.status_code, 0);
        let v = dropped.json(7);
        assert_eq!(v["installation_id"], 7);
        assert_eq!(v["guid"], "g");
        assert_eq!(v["redelivery"], false);
    }
}
