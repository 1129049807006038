//! The environment a job's worker is given, as a pure function of the
//! supervisor's `sandbox.env` and the job: no secret is ever among it (the
//! proxy holds the credentials), and the launcher adds only what its kind of
//! isolation needs.

use std::collections::BTreeMap;

use gatehouse_types::{env as vars, variables};

use super::spec::JobSpec;

/// The configured `sandbox.env` (in name order), then the job's own:
/// `GATEHOUSE_JOB`, `GATEHOUSE_TICKET`, `GATEHOUSE_PROMPT` (the prompt's
/// absolute path as the worker sees it), when the job names a repository,
/// `GH_REPO` for `gh`, and when it names the bot's fork, `GATEHOUSE_FORK`.
pub fn worker_env(
    sandbox_env: &BTreeMap<String, String>,
    job_id: &str,
    spec: &JobSpec,
    prompt_path: &str,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = sandbox_env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.push((vars::JOB.into(), job_id.to_owned()));
    env.push((vars::TICKET.into(), spec.ticket.clone()));
    env.push((vars::PROMPT.into(), prompt_path.to_owned()));
    if let Some(repo) = spec.variables.get(variables::REPO) {
        env.push(("GH_REPO".into(), repo.clone()));
    }
    if let Some(fork) = spec.variables.get(variables::FORK) {
        env.push((vars::FORK.into(), fork.clone()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(variables: &[(&str, &str)]) -> JobSpec {
        JobSpec {
            ticket: "tkt_7".into(),
            team: "web".into(),
            profile: "default".into(),
            rule_sets: vec!["github-worker".into()],
            tunnel_hosts: vec![],
            variables: variables
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            task: "t".into(),
            deadline_secs: 60,
            command: None,
        }
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const JOB: [(&str, &str); 3] = [
        ("GATEHOUSE_JOB", "job_1"),
        ("GATEHOUSE_TICKET", "tkt_7"),
        ("GATEHOUSE_PROMPT", "/work/.gatehouse/prompt.md"),
    ];

    #[test]
    fn worker_env_table() {
        type Case<'a> = (
            &'a [(&'a str, &'a str)],
            &'a [(&'a str, &'a str)],
            Vec<(&'a str, &'a str)>,
        );
        let cases: Vec<Case> = vec![
            // Nothing configured, no repository: the job's three only.
            (&[], &[], JOB.to_vec()),
            // The job's repository becomes GH_REPO, last.
            (
                &[],
                &[("repo", "acme/web")],
                [&JOB[..], &[("GH_REPO", "acme/web")]].concat(),
            ),
            // The bot's fork, for a team that delivers from one.
            (
                &[],
                &[("repo", "acme/web"), ("fork", "bot/web")],
                [
                    &JOB[..],
                    &[("GH_REPO", "acme/web"), ("GATEHOUSE_FORK", "bot/web")],
                ]
                .concat(),
            ),
            // Other variables are for the proxy's rules, not the worker.
            (&[], &[("branch", "main"), ("pr", "4")], JOB.to_vec()),
            // The configured environment comes first, in name order.
            (
                &[("LANG", "C.UTF-8"), ("CI", "1")],
                &[("repo", "o/r")],
                [
                    &[("CI", "1"), ("LANG", "C.UTF-8")][..],
                    &JOB[..],
                    &[("GH_REPO", "o/r")],
                ]
                .concat(),
            ),
        ];
        for (configured, variables, expected) in cases {
            let configured: BTreeMap<String, String> = pairs(configured).into_iter().collect();
            let env = worker_env(
                &configured,
                "job_1",
                &spec(variables),
                "/work/.gatehouse/prompt.md",
            );
            assert_eq!(env, pairs(&expected), "{configured:?} {variables:?}");
        }
    }

    #[test]
    fn nothing_of_the_spec_but_its_ticket_and_repository_reaches_the_worker() {
        let mut s = spec(&[("repo", "acme/web"), ("token", "not-a-secret")]);
        s.task = "TASK-TEXT".into();
        let env = worker_env(&BTreeMap::new(), "job_1", &s, "p");
        for (k, v) in &env {
            assert!(
                !v.contains("TASK-TEXT") && !v.contains("github-worker"),
                "{k}={v}"
            );
            assert!(!v.contains("not-a-secret"), "{k}={v}");
        }
    }
}
