//! The body of `POST /jobs`: parsed strictly, validated into a [`JobSpec`],
//! and hashed canonically for the idempotency check.

use std::collections::BTreeMap;

use gatehouse_types::{variables, ProfileName, RuleSetName, TeamName, TicketId, TunnelTarget};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::codec::{to_json_bytes, CodecError};

/// What the router sends to start a job. Unknown fields are refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    /// The ticket this job works on (`tkt_…`); names the work dir and the
    /// proxy identity.
    pub ticket: String,
    /// The team whose prompt (`prompts/team/<team>.md`) is rendered.
    pub team: String,
    /// The sandbox profile, by name.
    pub profile: String,
    /// Proxy rule sets the worker may use.
    #[serde(default, deserialize_with = "bounded::thirty_two")]
    pub rule_sets: Vec<String>,
    /// Hosts the worker may only tunnel to (package registries).
    #[serde(default, deserialize_with = "bounded::thirty_two")]
    pub tunnel_hosts: Vec<String>,
    /// Variables bound in the rule sets, e.g. `repo`.
    #[serde(default, deserialize_with = "bounded::variables")]
    pub variables: BTreeMap<String, String>,
    /// The task text, rendered into the prompt.
    pub task: String,
    /// Seconds from creation after which the job is killed (`timed_out`).
    #[serde(default)]
    pub deadline_secs: Option<u64>,
    /// The command to run inside the sandbox instead of the configured worker
    /// command (it runs sandboxed either way).
    #[serde(default, deserialize_with = "bounded::command")]
    pub command: Option<Vec<String>>,
}

/// The most entries of `rule_sets`, `tunnel_hosts` and `variables`.
pub const MAX_NAMES: usize = 32;
/// The most arguments of `command`.
pub const MAX_ARGS: usize = 256;

/// Deserializers that stop at a list's or map's limit: a 2 MiB body of a
/// million short items is refused at the first item past the limit, not
/// after a million allocations (which validation would then refuse).
mod bounded {
    use std::collections::BTreeMap;
    use std::fmt;

    use serde::de::{Deserializer, Error, MapAccess, SeqAccess, Visitor};

    struct Strings(usize);

    impl<'de> Visitor<'de> for Strings {
        type Value = Vec<String>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "a list of at most {} strings", self.0)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(item) = seq.next_element::<String>()? {
                if out.len() == self.0 {
                    return Err(A::Error::custom(format!("more than {} entries", self.0)));
                }
                out.push(item);
            }
            Ok(out)
        }
    }

    pub(super) fn thirty_two<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        d.deserialize_seq(Strings(super::MAX_NAMES))
    }

    struct Variables;

    impl<'de> Visitor<'de> for Variables {
        type Value = BTreeMap<String, String>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "a map of at most {} strings", super::MAX_NAMES)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((name, value)) = map.next_entry::<String, String>()? {
                out.insert(name, value);
                if out.len() > super::MAX_NAMES {
                    return Err(A::Error::custom(format!(
                        "more than {} entries",
                        super::MAX_NAMES
                    )));
                }
            }
            Ok(out)
        }
    }

    pub(super) fn variables<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, String>, D::Error> {
        d.deserialize_map(Variables)
    }

    struct Command;

    impl<'de> Visitor<'de> for Command {
        type Value = Option<Vec<String>>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "null or a list of at most {} strings", super::MAX_ARGS)
        }

        fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_seq(Strings(super::MAX_ARGS)).map(Some)
        }
    }

    pub(super) fn command<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Vec<String>>, D::Error> {
        d.deserialize_option(Command)
    }
}

/// Bounds a request must respect; from the supervisor's config.
#[derive(Clone, Debug)]
pub struct SpecLimits {
    pub max_task_bytes: usize,
    pub default_deadline_secs: u64,
    pub max_deadline_secs: u64,
    pub proxy_configured: bool,
}

/// A validated request. `deadline_secs` is always set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    pub ticket: String,
    pub team: String,
    pub profile: String,
    pub rule_sets: Vec<String>,
    pub tunnel_hosts: Vec<String>,
    pub variables: BTreeMap<String, String>,
    pub task: String,
    pub deadline_secs: u64,
    pub command: Option<Vec<String>>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecError {
    /// a field is malformed
    #[error("field `{field}`: {expected}")]
    Field {
        field: &'static str,
        expected: String,
    },
}

fn field(field: &'static str, expected: impl Into<String>) -> SpecError {
    SpecError::Field {
        field,
        expected: expected.into(),
    }
}

impl JobRequest {
    pub fn validate(self, limits: &SpecLimits) -> Result<JobSpec, SpecError> {
        if !TicketId::is_valid(&self.ticket) {
            return Err(field("ticket", TicketId::EXPECTED));
        }
        if !TeamName::is_valid(&self.team) {
            return Err(field("team", TeamName::EXPECTED));
        }
        if !ProfileName::is_valid(&self.profile) {
            return Err(field(
                "profile",
                format!("a profile name: {}", ProfileName::EXPECTED),
            ));
        }
        if self.rule_sets.len() > MAX_NAMES
            || !self.rule_sets.iter().all(|r| RuleSetName::is_valid(r))
        {
            return Err(field(
                "rule_sets",
                format!("at most 32 rule set names, each {}", RuleSetName::EXPECTED),
            ));
        }
        if !self.rule_sets.is_empty() && !limits.proxy_configured {
            return Err(field(
                "rule_sets",
                "no rule sets: this supervisor has no proxy configured",
            ));
        }
        if self.tunnel_hosts.len() > MAX_NAMES
            || !self.tunnel_hosts.iter().all(|h| TunnelTarget::is_valid(h))
        {
            return Err(field(
                "tunnel_hosts",
                format!("at most 32 host names, each {}", TunnelTarget::EXPECTED),
            ));
        }
        if !self.tunnel_hosts.is_empty() && !limits.proxy_configured {
            return Err(field(
                "tunnel_hosts",
                "no tunnel hosts: this supervisor has no proxy configured",
            ));
        }
        if self.variables.len() > MAX_NAMES {
            return Err(field("variables", "at most 32 entries"));
        }
        // The proxy's rule: the identity made from these must be accepted.
        for (name, value) in &self.variables {
            variables::check(name, value)
                .map_err(|e| field("variables", format!("`{name}`: {}", e.expected())))?;
        }
        if self.task.trim().is_empty() || self.task.len() > limits.max_task_bytes {
            return Err(field(
                "task",
                format!("non-empty text of at most {} bytes", limits.max_task_bytes),
            ));
        }
        let deadline_secs = self.deadline_secs.unwrap_or(limits.default_deadline_secs);
        if deadline_secs == 0 || deadline_secs > limits.max_deadline_secs {
            return Err(field(
                "deadline_secs",
                format!("1 to {} seconds", limits.max_deadline_secs),
            ));
        }
        if let Some(cmd) = &self.command {
            if cmd.is_empty() || cmd.len() > MAX_ARGS || cmd.iter().any(|a| a.contains('\0')) {
                return Err(field("command", "a non-empty argv without NUL bytes"));
            }
        }
        Ok(JobSpec {
            ticket: self.ticket,
            team: self.team,
            profile: self.profile,
            rule_sets: self.rule_sets,
            tunnel_hosts: self.tunnel_hosts,
            variables: self.variables,
            task: self.task,
            deadline_secs,
            command: self.command,
        })
    }

    /// SHA-256 (hex) of the request re-serialised in a fixed field order, so
    /// that whitespace or key order never make "the same body" differ.
    pub fn canonical_hash(&self) -> Result<String, CodecError> {
        let bytes = to_json_bytes("job request", self)?;
        Ok(hex::encode(Sha256::digest(bytes)))
    }
}

/// The job may use only rule sets and tunnels its sandbox profile lists:
/// the profile is the team's ceiling, the job asks for a subset.
pub fn check_scope(
    spec: &JobSpec,
    profile_rule_sets: &[String],
    profile_tunnels: &[String],
) -> Result<(), SpecError> {
    if let Some(r) = spec
        .rule_sets
        .iter()
        .find(|r| !profile_rule_sets.contains(r))
    {
        return Err(SpecError::Field {
            field: "rule_sets",
            expected: format!(
                "rule sets allowed by profile `{}` ({}); `{r}` is not",
                spec.profile,
                profile_rule_sets.join(", ")
            ),
        });
    }
    // Compared as targets: `host` and `host:443` are the same tunnel.
    let listed: Vec<TunnelTarget> = profile_tunnels
        .iter()
        .filter_map(|t| TunnelTarget::parse(t).ok())
        .collect();
    if let Some(t) = spec
        .tunnel_hosts
        .iter()
        .find(|t| !TunnelTarget::parse(t).is_ok_and(|t| listed.contains(&t)))
    {
        return Err(SpecError::Field {
            field: "tunnel_hosts",
            expected: format!(
                "tunnels allowed by profile `{}` ({}); `{t}` is not",
                spec.profile,
                profile_tunnels.join(", ")
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> SpecLimits {
        SpecLimits {
            max_task_bytes: 100,
            default_deadline_secs: 60,
            max_deadline_secs: 600,
            proxy_configured: true,
        }
    }

    fn base() -> JobRequest {
        serde_json::from_str(
            r#"{"ticket":"tkt_1","team":"core","profile":"default","rule_sets":["github"],
                "variables":{"repo":"o/r"},"task":"fix it"}"#,
        )
        .unwrap()
    }

    #[test]
    fn valid_request_gets_default_deadline() {
        let spec = base().validate(&limits()).unwrap();
        assert_eq!(spec.deadline_secs, 60);
        assert_eq!(spec.variables["repo"], "o/r");
    }

    /// Lists and maps are refused at their first entry past the limit,
    /// while parsing: a 2 MiB body of short entries stops near its start
    /// (the error's column says where), not after building all of them.
    #[test]
    fn long_lists_are_refused_where_they_pass_the_limit() {
        let body = |field: &str, value: String| {
            format!(
                r#"{{"ticket":"tkt_1","team":"core","profile":"default","task":"t","{field}":{value}}}"#
            )
        };
        let list = |n: usize| format!("[{}]", vec![r#""a""#; n].join(","));
        let map = |n: usize| {
            let entries: Vec<String> = (0..n).map(|i| format!(r#""k{i}":"v""#)).collect();
            format!("{{{}}}", entries.join(","))
        };
        // (field, at the limit, one past it, a 2 MiB body)
        let cases = [
            (
                "rule_sets",
                list(MAX_NAMES),
                list(MAX_NAMES + 1),
                list(500_000),
            ),
            (
                "tunnel_hosts",
                list(MAX_NAMES),
                list(MAX_NAMES + 1),
                list(500_000),
            ),
            (
                "variables",
                map(MAX_NAMES),
                map(MAX_NAMES + 1),
                map(200_000),
            ),
            ("command", list(MAX_ARGS), list(MAX_ARGS + 1), list(500_000)),
        ];
        for (field, at, past, huge) in cases {
            let parsed: JobRequest = serde_json::from_str(&body(field, at)).unwrap();
            assert!(parsed.canonical_hash().is_ok(), "{field}");
            let error = serde_json::from_str::<JobRequest>(&body(field, past)).unwrap_err();
            assert!(error.to_string().contains("more than"), "{field}: {error}");
            let huge = body(field, huge);
            assert!(huge.len() > 1 << 20, "{field}");
            let error = serde_json::from_str::<JobRequest>(&huge).unwrap_err();
            assert!(
                error.column() < 4096,
                "{field}: refused at column {} of {}",
                error.column(),
                huge.len()
            );
        }
        // `command` may still be null or absent.
        let null: JobRequest = serde_json::from_str(&body("command", "null".into())).unwrap();
        assert_eq!(null.command, None);
        assert_eq!(base().command, None);
    }

    #[test]
    fn malformed_fields_are_named() {
        type Edit = fn(&mut JobRequest);
        let cases: [(Edit, &str); 18] = [
            (|r| r.ticket = "1".into(), "ticket"),
            (|r| r.ticket = "tkt_../x".into(), "ticket"),
            // The ticket names the proxy identity, which refuses a `.`.
            (|r| r.ticket = "tkt_v1.2".into(), "ticket"),
            (|r| r.team = "a.b".into(), "team"),
            (|r| r.profile = "teams/web.v2".into(), "profile"),
            (|r| r.rule_sets = vec!["GitHub".into()], "rule_sets"),
            (
                |r| r.tunnel_hosts = vec!["localhost:443".into()],
                "tunnel_hosts",
            ),
            (
                |r| r.tunnel_hosts = vec!["registry.npmjs.org:0".into()],
                "tunnel_hosts",
            ),
            (
                |r| {
                    r.variables.insert("repo".into(), "octo".into());
                },
                "variables",
            ),
            (|r| r.team = "../etc".into(), "team"),
            (|r| r.team = ".hidden".into(), "team"),
            (|r| r.profile = "a/../b".into(), "profile"),
            (|r| r.rule_sets = vec!["a b".into()], "rule_sets"),
            (|r| r.task = " ".into(), "task"),
            (|r| r.task = "x".repeat(101), "task"),
            (|r| r.deadline_secs = Some(0), "deadline_secs"),
            (|r| r.deadline_secs = Some(601), "deadline_secs"),
            (|r| r.command = Some(vec![]), "command"),
        ];
        for (edit, want) in cases {
            let mut r = base();
            edit(&mut r);
            match r.validate(&limits()) {
                Err(SpecError::Field { field, .. }) => assert_eq!(field, want),
                Ok(_) => panic!("accepted a bad `{want}`"),
            }
        }
    }

    #[test]
    fn scope_is_bounded_by_the_profile() {
        let mut spec = base().validate(&limits()).unwrap();
        let allowed = vec!["github".to_owned(), "model-api".to_owned()];
        let tunnels = vec!["registry.npmjs.org:443".to_owned()];
        assert_eq!(check_scope(&spec, &allowed, &tunnels), Ok(()));
        spec.tunnel_hosts = vec!["registry.npmjs.org:443".into()];
        assert_eq!(check_scope(&spec, &allowed, &tunnels), Ok(()));
        spec.tunnel_hosts = vec!["registry.npmjs.org".into()];
        assert_eq!(check_scope(&spec, &allowed, &tunnels), Ok(()));
        spec.tunnel_hosts = vec!["registry.npmjs.org:8443".into()];
        assert!(check_scope(&spec, &allowed, &tunnels).is_err());
        spec.tunnel_hosts = vec!["evil.example:443".into()];
        assert!(matches!(
            check_scope(&spec, &allowed, &tunnels),
            Err(SpecError::Field {
                field: "tunnel_hosts",
                ..
            })
        ));
        spec.tunnel_hosts.clear();
        spec.rule_sets = vec!["github".into(), "feishu-admin".into()];
        assert!(matches!(
            check_scope(&spec, &allowed, &tunnels),
            Err(SpecError::Field {
                field: "rule_sets",
                ..
            })
        ));
    }

    #[test]
    fn rule_sets_need_a_proxy() {
        let l = SpecLimits {
            proxy_configured: false,
            ..limits()
        };
        assert!(base().validate(&l).is_err());
        let mut r = base();
        r.rule_sets.clear();
        assert!(r.validate(&l).is_ok());
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = serde_json::from_str::<JobRequest>(
            r#"{"ticket":"tkt_1","team":"c","profile":"p","task":"t","privileged":true}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("privileged"), "{err}");
    }

    #[test]
    fn hash_ignores_formatting_but_not_content() {
        let a: JobRequest = serde_json::from_str(
            r#"{"ticket":"tkt_1","team":"c","profile":"p","task":"t","variables":{"a":"1","b":"2"}}"#,
        )
        .unwrap();
        let b: JobRequest = serde_json::from_str(
            r#"{ "variables":{"b":"2","a":"1"}, "task":"t","profile":"p","team":"c","ticket":"tkt_1" }"#,
        )
        .unwrap();
        assert_eq!(a.canonical_hash().unwrap(), b.canonical_hash().unwrap());
        let mut c = a.clone();
        c.task = "u".into();
        assert_ne!(a.canonical_hash().unwrap(), c.canonical_hash().unwrap());
    }
}
