//! Checks at start, so a mistake in the config shows when the supervisor
//! starts rather than as the first job's failure: the prompts directory and
//! its templates, and the profiles directory and every profile in it.
//! Rule sets are the proxy's: when its admin socket answers at start, each
//! rule set a profile allows that the proxy cannot serve is named in a
//! warning ([`check_rule_sets`]); an identity naming one is refused when
//! its job starts, whether or not the proxy answered at start.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gatehouse_types::wire::KnownRuleSet;

use super::config::Config;
use super::prompts::render;

/// A config key whose value cannot work, and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("config key `{key}`: {message}")]
pub struct PreflightError {
    pub key: &'static str,
    pub message: String,
}

fn refuse(key: &'static str, message: String) -> PreflightError {
    PreflightError { key, message }
}

/// Each profile's name and the rule sets it allows.
pub type ProfileRuleSets = Vec<(String, Vec<String>)>;

/// Everything [`Config`] names that a job will need, checked now; returns
/// the rule sets each profile allows, for [`check_rule_sets`].
pub fn check(config: &Config) -> Result<ProfileRuleSets, PreflightError> {
    check_prompts(&config.prompts_dir)?;
    match &config.profiles_dir {
        Some(dir) => check_profiles(dir),
        None => Ok(vec![]),
    }
}

/// What start-up says of each rule set a profile allows that the proxy
/// cannot serve (pure): one line each, naming the profile and the set. Not
/// an error: a profile inherits the sets of the ones it extends (the
/// built-in `default` allows `github-worker` and `model-api`), and a
/// deployment need not serve them all; a job naming such a set is refused
/// when it starts, with the proxy's reason.
pub fn check_rule_sets(profiles: &[(String, Vec<String>)], known: &[KnownRuleSet]) -> Vec<String> {
    let mut warnings = vec![];
    for (profile, rule_sets) in profiles {
        for name in rule_sets {
            match known.iter().find(|k| k.name.as_str() == name) {
                None => warnings.push(format!(
                    "profile `{profile}` allows rule set `{name}`, which the proxy does not have: \
                     jobs naming it will be refused"
                )),
                Some(KnownRuleSet {
                    withdrawn: Some(why),
                    ..
                }) => warnings.push(format!(
                    "profile `{profile}` allows rule set `{name}`, withdrawn by the proxy: {why}"
                )),
                Some(_) => {}
            }
        }
    }
    warnings
}

/// `prompts_dir` holds `work.md`, and every template there renders with
/// the placeholders a job provides (a typo would fail every job).
fn check_prompts(dir: &Path) -> Result<(), PreflightError> {
    let key = "prompts_dir";
    if !dir.is_dir() {
        return Err(refuse(key, format!("{} is not a directory", dir.display())));
    }
    let vars: BTreeMap<&str, String> = ["ticket", "job", "team", "repo"]
        .into_iter()
        .map(|name| (name, String::new()))
        .collect();
    let mut templates = vec![("work.md".to_string(), dir.join("work.md"))];
    if let Ok(entries) = std::fs::read_dir(dir.join("team")) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".md") {
                templates.push((format!("team/{name}"), e.path()));
            }
        }
    }
    for (name, path) in templates {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| refuse(key, format!("cannot read {}: {e}", path.display())))?;
        render(&name, &text, &vars).map_err(|e| refuse(key, e.to_string()))?;
    }
    Ok(())
}

/// `sandbox.profiles_dir` exists, and every profile in it (`*.toml`, one
/// level of subdirectories for names like `teams/web`) resolves: parses,
/// its `extends` chain is found, and the merge validates.
fn check_profiles(dir: &Path) -> Result<ProfileRuleSets, PreflightError> {
    let key = "sandbox.profiles_dir";
    if !dir.is_dir() {
        return Err(refuse(key, format!("{} is not a directory", dir.display())));
    }
    let source = crate::profile::DirSource {
        dirs: vec![dir.to_owned()],
    };
    let mut allowed = vec![];
    for name in profile_names(dir) {
        let profile = crate::profile::resolve(&source, &name)
            .map_err(|e| refuse(key, format!("profile `{name}`: {e}")))?;
        allowed.push((name, profile.network.rule_sets));
    }
    Ok(allowed)
}

/// The profile names in `dir`: `<name>.toml` and `<sub>/<name>.toml`.
fn profile_names(dir: &Path) -> Vec<String> {
    let mut names = vec![];
    let toml_stem = |p: &PathBuf| {
        (p.extension().is_some_and(|e| e == "toml"))
            .then(|| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .flatten()
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return names;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            let sub = e.file_name().to_string_lossy().into_owned();
            // Rule sets kept beside the profiles are not profiles.
            if sub == "rules" {
                continue;
            }
            for inner in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                if let Some(stem) = toml_stem(&inner.path()) {
                    names.push(format!("{sub}/{stem}"));
                }
            }
        } else if let Some(stem) = toml_stem(&path) {
            names.push(stem);
        }
    }
    names.sort();
    names
}

#[cfg(test)]
mod tests;
