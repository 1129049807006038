//! A rotated set of audit log files: the active file `<name>` and the
//! files rotated out of it, `<name>.000001`, `<name>.000002`, … numbered in
//! the order they were written. Finding the set is by name; whether the
//! files really follow each other is the chain's to say (each later file's
//! header names the previous file's last hash and its own number).

use std::path::{Path, PathBuf};

use super::AuditError;

/// Digits of a rotated file's number.
const DIGITS: usize = 6;

/// The name of file `number` rotated out of `active`.
pub fn rotated_path(active: &Path, number: u64) -> PathBuf {
    let mut name = active.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{number:0DIGITS$}"));
    active.with_file_name(name)
}

/// The number of a rotated file of `base`, from its name (`base.000042`).
pub fn rotated_number(base: &str, name: &str) -> Option<u64> {
    let digits = name.strip_prefix(base)?.strip_prefix('.')?;
    (digits.len() >= DIGITS && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The files of one set, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSet {
    files: Vec<PathBuf>,
}

impl LogSet {
    /// The set `path` names: a file (the active file, with its rotated
    /// files beside it), or a directory holding one set.
    pub fn find(path: &Path) -> Result<LogSet, AuditError> {
        let io = |source| AuditError::Io {
            path: path.to_owned(),
            source,
        };
        let (dir, base) = if path.is_dir() {
            (path.to_owned(), Self::base_in(path)?)
        } else {
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
                _ => PathBuf::from("."),
            };
            let base = path
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| AuditError::Set {
                    path: path.to_owned(),
                    why: "not a file name".into(),
                })?
                .to_owned();
            (dir, base)
        };
        let mut rotated: Vec<(u64, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            let name = entry.file_name();
            if let Some(n) = name.to_str().and_then(|n| rotated_number(&base, n)) {
                rotated.push((n, entry.path()));
            }
        }
        rotated.sort();
        let mut files: Vec<PathBuf> = rotated.into_iter().map(|(_, p)| p).collect();
        let active = dir.join(&base);
        if active.is_file() || files.is_empty() {
            files.push(active);
        }
        Ok(LogSet { files })
    }

    /// The one set's name in `dir`: a `*.jsonl` file or the base of
    /// rotated files.
    fn base_in(dir: &Path) -> Result<String, AuditError> {
        let io = |source| AuditError::Io {
            path: dir.to_owned(),
            source,
        };
        let mut bases = std::collections::BTreeSet::new();
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let name = entry.map_err(io)?.file_name();
            let Some(name) = name.to_str() else { continue };
            match name.rsplit_once('.') {
                Some((base, digits))
                    if digits.len() >= DIGITS && digits.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    bases.insert(base.to_owned());
                }
                _ if name.ends_with(".jsonl") => {
                    bases.insert(name.to_owned());
                }
                _ => {}
            }
        }
        let mut bases = bases.into_iter();
        match (bases.next(), bases.next()) {
            (Some(base), None) => Ok(base),
            (None, _) => Err(AuditError::Set {
                path: dir.to_owned(),
                why: "no audit log (*.jsonl, or rotated *.jsonl.NNNNNN) in the directory".into(),
            }),
            (Some(a), Some(b)) => Err(AuditError::Set {
                path: dir.to_owned(),
                why: format!(
                    "more than one log in the directory ({a}, {b}, …): name the active file"
                ),
            }),
        }
    }

    /// The files, oldest first; the active file last.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_rotated_files() {
        let active = Path::new("/var/log/g/audit.jsonl");
        assert_eq!(
            rotated_path(active, 7),
            Path::new("/var/log/g/audit.jsonl.000007")
        );
        assert_eq!(rotated_number("audit.jsonl", "audit.jsonl.000007"), Some(7));
        assert_eq!(
            rotated_number("audit.jsonl", "audit.jsonl.1234567"),
            Some(1_234_567)
        );
        for other in [
            "audit.jsonl",
            "audit.jsonl.07",
            "audit.jsonl.00000x",
            "other.jsonl.000001",
            "audit.jsonl.000001.tmp",
        ] {
            assert_eq!(rotated_number("audit.jsonl", other), None, "{other}");
        }
    }

    #[test]
    fn a_set_is_found_from_its_active_file_or_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for name in [
            "audit.jsonl.000010",
            "audit.jsonl.000002",
            "audit.jsonl",
            "notes.txt",
        ] {
            std::fs::write(d.join(name), "").unwrap();
        }
        let want = vec![
            d.join("audit.jsonl.000002"),
            d.join("audit.jsonl.000010"),
            d.join("audit.jsonl"),
        ];
        assert_eq!(LogSet::find(&d.join("audit.jsonl")).unwrap().files(), want);
        assert_eq!(LogSet::find(d).unwrap().files(), want);
        std::fs::write(d.join("other.jsonl"), "").unwrap();
        assert!(LogSet::find(d).is_err());
        assert_eq!(
            LogSet::find(&d.join("other.jsonl")).unwrap().files(),
            vec![d.join("other.jsonl")]
        );
    }
}
