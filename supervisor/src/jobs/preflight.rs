//! Checks at start, so a mistake in the config shows when the supervisor
//! starts rather than as the first job's failure: the prompts directory and
//! its templates, and the profiles directory and every profile in it.
//! Rule sets are the proxy's to validate (an identity naming an unknown one
//! is refused when the job starts).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

/// Everything [`Config`] names that a job will need, checked now.
pub fn check(config: &Config) -> Result<(), PreflightError> {
    check_prompts(&config.prompts_dir)?;
    if let Some(dir) = &config.profiles_dir {
        check_profiles(dir)?;
    }
    Ok(())
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
fn check_profiles(dir: &Path) -> Result<(), PreflightError> {
    let key = "sandbox.profiles_dir";
    if !dir.is_dir() {
        return Err(refuse(key, format!("{} is not a directory", dir.display())));
    }
    let source = crate::profile::DirSource {
        dirs: vec![dir.to_owned()],
    };
    for name in profile_names(dir) {
        crate::profile::resolve(&source, &name)
            .map_err(|e| refuse(key, format!("profile `{name}`: {e}")))?;
    }
    Ok(())
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
