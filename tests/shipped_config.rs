//! The shipped configuration holds together: every proxy rule set named by a
//! shipped sandbox profile or by the example router policy exists in
//! `sandbox-profiles/rules/`, and all shipped rule sets load (their examples
//! checked) into one rule book.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use gatehouse_proxy::rules::{RuleBook, RuleSet};

fn root() -> PathBuf {
    gatehouse_testkit::bin::repo_root()
}

fn toml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

fn shipped_rule_book() -> RuleBook {
    let sets = toml_files(&root().join("sandbox-profiles/rules"))
        .into_iter()
        .map(|p| {
            RuleSet::parse(
                &p.display().to_string(),
                &std::fs::read_to_string(&p).unwrap(),
            )
            .unwrap()
        });
    RuleBook::new(sets).unwrap()
}

fn profile_rule_sets(profile: &Path) -> Vec<String> {
    let out = gatehouse_testkit::bin::command()
        .args(["profile", "check", "--json"])
        .arg(profile)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "profile check {} failed: {}",
        profile.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let resolved: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    resolved["network"]["rule_sets"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: no network.rule_sets in {resolved}", profile.display()))
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn every_rule_set_a_shipped_profile_names_is_shipped() {
    let book = shipped_rule_book();
    let known: BTreeSet<&str> = book.names().collect();
    let mut profiles = toml_files(&root().join("sandbox-profiles"));
    profiles.extend(toml_files(&root().join("sandbox-profiles/teams")));
    assert!(
        profiles.len() >= 4,
        "expected base, default and two team profiles"
    );
    let mut named = 0;
    for profile in &profiles {
        for set in profile_rule_sets(profile) {
            named += 1;
            assert!(
                known.contains(set.as_str()),
                "{} names rule set {set:?}, which is not in sandbox-profiles/rules/ (known: {known:?})",
                profile.display()
            );
        }
    }
    assert!(named > 0, "no shipped profile names a rule set");
}

#[test]
fn every_rule_set_the_example_policy_names_is_shipped() {
    let book = shipped_rule_book();
    let known: BTreeSet<&str> = book.names().collect();
    let text = std::fs::read_to_string(root().join("router/examples/policy.toml")).unwrap();
    let policy: toml::Value = toml::from_str(&text).unwrap();
    let mut named = Vec::new();
    collect_rule_sets(&policy, &mut named);
    assert!(!named.is_empty(), "the example policy names no rule set");
    for set in named {
        assert!(
            known.contains(set.as_str()),
            "router/examples/policy.toml names unknown rule set {set:?}"
        );
    }
}

fn collect_rule_sets(value: &toml::Value, out: &mut Vec<String>) {
    match value {
        toml::Value::Table(table) => {
            for (key, v) in table {
                if key == "rule_sets" {
                    out.extend(
                        v.as_array()
                            .unwrap()
                            .iter()
                            .map(|s| s.as_str().unwrap().to_owned()),
                    );
                } else {
                    collect_rule_sets(v, out);
                }
            }
        }
        toml::Value::Array(items) => items.iter().for_each(|v| collect_rule_sets(v, out)),
        _ => {}
    }
}

/// The supervisor's systemd unit bounds it to the capabilities `gatehouse
/// up` bounds it to: one list, whose sufficiency the tests under `up` as
/// root show (sandboxes are built there).
#[test]
fn the_supervisor_unit_keeps_the_capabilities_up_keeps() {
    let unit = std::fs::read_to_string(root().join("deploy/systemd/gatehouse-supervisor.service"))
        .unwrap();
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .unwrap();
    let mut listed: Vec<&str> = line.split_whitespace().collect();
    listed.sort();
    let mut kept: Vec<String> = gatehouse_supervisor::sandbox::SUPERVISOR_CAPABILITIES
        .iter()
        .map(|c| c.to_string())
        .collect();
    kept.sort();
    assert_eq!(listed, kept);
}

/// The shipped units are what systemd itself accepts: `systemd-analyze
/// verify` on copies whose commands name the built binary (the one change
/// from an install in /usr/local/bin) says nothing at all.
#[test]
fn the_shipped_systemd_units_verify() {
    let dir = tempfile::tempdir().unwrap();
    let bin = gatehouse_testkit::bin::gatehouse();
    let mut units = Vec::new();
    for entry in std::fs::read_dir(root().join("deploy/systemd")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "service") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                text.contains("/usr/local/bin/gatehouse "),
                "{}",
                path.display()
            );
            let copy = dir.path().join(path.file_name().unwrap());
            std::fs::write(
                &copy,
                text.replace("/usr/local/bin/gatehouse ", &format!("{} ", bin.display())),
            )
            .unwrap();
            units.push(copy);
        }
    }
    units.sort();
    assert_eq!(units.len(), 3, "{units:?}");
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .args(&units)
        .output()
        .expect("systemd-analyze (scripts/setup-debian installs systemd)");
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(
        said.trim().is_empty(),
        "systemd-analyze verify complained:\n{said}"
    );
    // The control: a unit with an unknown key is refused by the same check.
    let broken = dir.path().join("gatehouse-broken.service");
    let text = std::fs::read_to_string(&units[0]).unwrap();
    std::fs::write(
        &broken,
        text.replace("[Service]", "[Service]\nNoSuchKeyAtAll=yes"),
    )
    .unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&broken)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("NoSuchKeyAtAll"), "{said}");
}
