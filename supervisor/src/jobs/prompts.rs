//! Worker prompts: `work.md`, the team's `team/<team>.md` and the task,
//! rendered into one file in the job's work dir. Rendering is a pure function.

use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PromptError {
    /// a template names a variable that is not defined
    #[error("{template}: unknown placeholder `{{{{{name}}}}}`")]
    UnknownPlaceholder { template: String, name: String },
}

/// Replaces `{{name}}` with `vars[name]`; an unknown name is an error (a typo
/// in a prompt should fail loudly, not reach a worker as literal braces).
/// A line starting with `{{?name}}` is kept (without the marker) only when
/// `name` is not empty, so a job without a repository reads no
/// "The repository is ``.".
pub fn render(
    template_name: &str,
    template: &str,
    vars: &BTreeMap<&str, String>,
) -> Result<String, PromptError> {
    let mut kept = String::with_capacity(template.len());
    for line in template.split_inclusive('\n') {
        let Some(marked) = line.strip_prefix("{{?") else {
            kept.push_str(line);
            continue;
        };
        let Some((name, rest)) = marked.split_once("}}") else {
            kept.push_str(line);
            continue;
        };
        let value = vars
            .get(name.trim())
            .ok_or_else(|| PromptError::UnknownPlaceholder {
                template: template_name.into(),
                name: name.trim().into(),
            })?;
        if !value.is_empty() {
            kept.push_str(rest);
        }
    }
    substitute(template_name, &kept, vars)
}

fn substitute(
    template_name: &str,
    template: &str,
    vars: &BTreeMap<&str, String>,
) -> Result<String, PromptError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let name = after[..end].trim();
        match vars.get(name) {
            Some(value) => out.push_str(value),
            None => {
                return Err(PromptError::UnknownPlaceholder {
                    template: template_name.into(),
                    name: name.into(),
                })
            }
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The whole prompt a worker reads: the general rules, the team's, then the
/// task, which is data and never rendered (a task may contain braces).
pub fn assemble(work: &str, team: Option<&str>, task: &str) -> String {
    let mut out = String::new();
    out.push_str(work.trim_end());
    out.push_str("\n\n");
    if let Some(team) = team {
        out.push_str(team.trim_end());
        out.push_str("\n\n");
    }
    out.push_str("# Your task\n\n");
    out.push_str(task.trim_end());
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_table() {
        let vars: BTreeMap<&str, String> = [
            ("ticket", "tkt_1".to_owned()),
            ("repo", "o/r".to_owned()),
            ("job", String::new()),
        ]
        .into();
        let cases = [
            ("plain", Ok("plain")),
            ("{{ticket}} on {{ repo }}", Ok("tkt_1 on o/r")),
            ("{{ticket", Ok("{{ticket")),
            ("a {{nope}} b", Err("nope")),
            // A conditional line: kept without its marker when set, else
            // dropped whole; an unknown name is still an error.
            ("a\n{{?repo}}in {{repo}}.\nb", Ok("a\nin o/r.\nb")),
            ("a\n{{?job}}job {{job}}.\nb", Ok("a\nb")),
            ("{{?job}}last", Ok("")),
            ("x {{?repo}} y", Err("?repo")),
            ("{{?nope}}x", Err("nope")),
        ];
        for (template, want) in cases {
            let got = render("work.md", template, &vars);
            match want {
                Ok(s) => assert_eq!(got.as_deref(), Ok(s)),
                Err(name) => {
                    let e = got.unwrap_err();
                    assert_eq!(
                        e,
                        PromptError::UnknownPlaceholder {
                            template: "work.md".into(),
                            name: name.into()
                        }
                    );
                }
            }
        }
    }

    /// The shipped prompts, for a job that names no repository and one
    /// that does.
    #[test]
    fn shipped_prompts_say_nothing_empty() {
        let templates = [
            ("work.md", include_str!("../../../prompts/work.md")),
            (
                "team/default.md",
                include_str!("../../../prompts/team/default.md"),
            ),
        ];
        for repo in ["", "acme/widgets"] {
            let vars: BTreeMap<&str, String> = [
                ("ticket", "tkt_1".to_owned()),
                ("job", "job_1".to_owned()),
                ("team", "default".to_owned()),
                ("repo", repo.to_owned()),
            ]
            .into();
            for (name, text) in templates {
                let out = render(name, text, &vars).unwrap();
                assert!(!out.contains("``"), "{name} with repo {repo:?}: {out}");
                assert!(!out.contains("{{"), "{name}: {out}");
                if !repo.is_empty() && name == "work.md" {
                    assert!(out.contains("The repository is `acme/widgets`."), "{out}");
                }
            }
        }
    }

    #[test]
    fn task_is_not_rendered() {
        let p = assemble("W", Some("T"), "print {{x}}");
        assert_eq!(p, "W\n\nT\n\n# Your task\n\nprint {{x}}\n");
        assert_eq!(assemble("W", None, "t"), "W\n\n# Your task\n\nt\n");
    }
}
