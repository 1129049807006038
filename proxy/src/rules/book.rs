//! The loaded rule sets: `extends` resolved depth-first, every set's
//! examples checked against the resolved book, and what an identity's rule
//! sets need (their variables, their GitHub App permissions).

use std::collections::BTreeMap;

use gatehouse_types::wire::KnownRuleSet;

use super::parse::parse_example;
use super::{Access, Decision, RuleBook, RuleError, RuleSet};
use crate::path::{self, Vars};

impl RuleBook {
    /// Gather rule sets, resolve `extends`, then check every set's examples.
    pub fn new(sets: impl IntoIterator<Item = RuleSet>) -> Result<Self, RuleError> {
        let mut given = BTreeMap::new();
        for set in sets {
            if given.contains_key(&set.name) {
                return Err(RuleError::Duplicate(set.name));
            }
            given.insert(set.name.clone(), set);
        }
        let mut book = Self::default();
        for name in given.keys() {
            book.resolve(name, &given, &mut Vec::new())?;
        }
        for set in book.sets.values() {
            check_owners(set)?;
            book.check_examples(set)?;
        }
        Ok(book)
    }

    /// Resolve one set's `extends` depth-first; `stack` detects cycles.
    fn resolve(
        &mut self,
        name: &str,
        given: &BTreeMap<String, RuleSet>,
        stack: &mut Vec<String>,
    ) -> Result<(), RuleError> {
        if self.sets.contains_key(name) {
            return Ok(());
        }
        let set = given
            .get(name)
            .ok_or_else(|| RuleError::UnknownRuleSet(name.to_owned()))?;
        let invalid = |message: String| RuleError::Invalid {
            source_name: set.source_name.clone(),
            key: "extends".into(),
            message,
        };
        if stack.iter().any(|s| s == name) {
            return Err(invalid(format!(
                "`extends` forms a cycle: {} -> {name}",
                stack.join(" -> ")
            )));
        }
        stack.push(name.to_owned());
        let mut resolved = set.clone();
        resolved.rules.clear();
        for parent in &set.extends {
            if !given.contains_key(parent) {
                return Err(invalid(format!("unknown rule set `{parent}`")));
            }
            self.resolve(parent, given, stack)?;
            let parent = &self.sets[parent];
            resolved.variables.extend(parent.variables.iter().cloned());
            for (permission, access) in &parent.github_permissions {
                let entry = resolved
                    .github_permissions
                    .entry(permission.clone())
                    .or_insert(*access);
                *entry = (*entry).max(*access);
            }
            resolved.rules.extend(parent.rules.iter().cloned());
        }
        stack.pop();
        for rule in &set.rules {
            if resolved.rules.iter().any(|r| r.name == rule.name) {
                return Err(invalid(format!(
                    "rule `{}` is also defined in an extended set",
                    rule.name
                )));
            }
            match &rule.replaces {
                None => resolved.rules.push(rule.clone()),
                Some(replaced) => {
                    let at = resolved
                        .rules
                        .iter()
                        .position(|r| &r.name == replaced)
                        .ok_or_else(|| {
                            invalid(format!(
                                "rule `{}` replaces `{replaced}`, which no extended set defines",
                                rule.name
                            ))
                        })?;
                    resolved.rules[at] = rule.clone();
                }
            }
        }
        self.sets.insert(name.to_owned(), resolved);
        Ok(())
    }

    fn check_examples(&self, set: &RuleSet) -> Result<(), RuleError> {
        let names = [set.name.clone()];
        for (line, expect_allow) in &set.examples {
            let Some(head) = parse_example(line) else {
                continue;
            };
            let actual = match self.check(&head, &names, &set.example_variables) {
                Decision::Allow(_) if *expect_allow => continue,
                Decision::Deny(_) if !*expect_allow => continue,
                Decision::Allow(a) => format!("allowed by rule `{}`", a.rule),
                Decision::Deny(d) => format!("denied: {}", d.reason),
            };
            return Err(RuleError::Example {
                source_name: set.source_name.clone(),
                example: line.clone(),
                expected: if *expect_allow { "allowed" } else { "denied" },
                actual,
            });
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Option<&RuleSet> {
        self.sets.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.sets.keys().map(String::as_str)
    }

    /// Takes set `name` out of use, keeping why: an identity that names it
    /// is then refused with that reason, not with "unknown rule set".
    pub fn withdraw(&mut self, name: &str, why: String) {
        if self.sets.remove(name).is_some() {
            self.withdrawn.insert(name.to_owned(), why);
        }
    }

    /// The sets withdrawn from use, with why.
    pub fn withdrawn(&self) -> impl Iterator<Item = (&str, &str)> {
        self.withdrawn.iter().map(|(n, w)| (n.as_str(), w.as_str()))
    }

    /// Every set by name, usable or withdrawn (with why), as the admin API's
    /// `GET /rule-sets` lists them.
    pub fn known_rule_sets(&self) -> Vec<KnownRuleSet> {
        let mut known: Vec<KnownRuleSet> = self
            .sets
            .values()
            .filter_map(|set| {
                Some(KnownRuleSet {
                    name: set.name.parse().ok()?,
                    variables: set.variables.iter().cloned().collect(),
                    withdrawn: None,
                })
            })
            .chain(self.withdrawn.iter().filter_map(|(name, why)| {
                Some(KnownRuleSet {
                    name: name.parse().ok()?,
                    variables: vec![],
                    withdrawn: Some(why.clone()),
                })
            }))
            .collect();
        known.sort_by(|a, b| a.name.cmp(&b.name));
        known
    }

    /// The GitHub App permissions an identity with `rule_sets` needs: the
    /// union of the sets', the higher level winning. Unknown sets add nothing.
    pub fn github_permissions(&self, rule_sets: &[String]) -> BTreeMap<String, Access> {
        let mut permissions = BTreeMap::new();
        for set in rule_sets.iter().filter_map(|name| self.sets.get(name)) {
            for (permission, access) in &set.github_permissions {
                let entry = permissions.entry(permission.clone()).or_insert(*access);
                *entry = (*entry).max(*access);
            }
        }
        permissions
    }

    /// Check that an identity's rule sets exist and its variables bind every
    /// variable they need with a value that can stand in a path.
    pub fn check_identity(&self, rule_sets: &[String], vars: &Vars) -> Result<(), RuleError> {
        for name in rule_sets {
            if let Some(why) = self.withdrawn.get(name) {
                return Err(RuleError::Withdrawn {
                    rule_set: name.clone(),
                    why: why.clone(),
                });
            }
            let set = self
                .sets
                .get(name)
                .ok_or_else(|| RuleError::UnknownRuleSet(name.clone()))?;
            for variable in &set.variables {
                let value = vars.get(variable).ok_or_else(|| RuleError::Variable {
                    rule_set: name.clone(),
                    variable: variable.clone(),
                    message: "missing".into(),
                })?;
                path::check_variable_value(value).map_err(|message| RuleError::Variable {
                    rule_set: name.clone(),
                    variable: variable.clone(),
                    message,
                })?;
            }
        }
        Ok(())
    }
}

/// Every `own` names a message kind some rule of the (resolved) set logs
/// creations as: ids are only ever learnt from those answers, so any other
/// kind would refuse every request, and is a mistake to report at load.
fn check_owners(set: &RuleSet) -> Result<(), RuleError> {
    let kinds: Vec<&str> = set
        .rules
        .iter()
        .filter_map(|r| r.message.as_ref().map(|m| m.kind.as_str()))
        .collect();
    for rule in &set.rules {
        if let Some(own) = rule
            .own
            .as_ref()
            .filter(|o| !kinds.contains(&o.created_as.as_str()))
        {
            return Err(RuleError::Invalid {
                source_name: set.source_name.clone(),
                key: format!("rule `{}`.own.created_as", rule.name),
                message: format!(
                    "no rule of the set logs creations as message kind `{}`",
                    own.created_as
                ),
            });
        }
    }
    Ok(())
}
