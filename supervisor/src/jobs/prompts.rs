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
pub fn render(
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
        let vars: BTreeMap<&str, String> =
            [("ticket", "tkt_1".to_owned()), ("repo", "o/r".to_owned())].into();
        let cases = [
            ("plain", Ok("plain")),
            ("{{ticket}} on {{ repo }}", Ok("tkt_1 on o/r")),
            ("{{ticket", Ok("{{ticket")),
            ("a {{nope}} b", Err("nope")),
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

    #[test]
    fn task_is_not_rendered() {
        let p = assemble("W", Some("T"), "print {{x}}");
        assert_eq!(p, "W\n\nT\n\n# Your task\n\nprint {{x}}\n");
        assert_eq!(assemble("W", None, "t"), "W\n\n# Your task\n\nt\n");
    }
}
