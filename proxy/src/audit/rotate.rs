//! Rotation: when the current file is big or old enough ([`Rotation::due`],
//! pure), it is synced, renamed to `<name>.<its number>`, and a new file is
//! started whose first line is a header naming its number and, in `prev`,
//! the old file's last hash: one chain across the set. Rotation happens
//! under the log's lock, between two writes, so no record is lost or split
//! across files. Rotated files beyond `keep` are removed, oldest first.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use super::set::{rotated_number, rotated_path, LogSet};
use super::{rfc3339_utc, verify_bytes, AuditError, AuditLog, HeaderRecord, Record, VerifyReport};

/// When the log moves to a new file, and how many old files it keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rotation {
    max_bytes: Option<u64>,
    max_age_ms: Option<u64>,
    keep: Option<u64>,
}

impl Rotation {
    /// Rotation by size (bytes), by age (seconds), or both; `keep` rotated
    /// files at most. Zero is refused (it would rotate on every write, or
    /// keep nothing of the past), and so is `keep` without a rotation.
    /// The error names the key (`rotate_bytes`, `rotate_secs`,
    /// `keep_files`, as the config files spell them) and why.
    pub fn new(
        max_bytes: Option<u64>,
        max_age_secs: Option<u64>,
        keep: Option<u64>,
    ) -> Result<Rotation, (&'static str, String)> {
        for (key, value) in [
            ("rotate_bytes", max_bytes),
            ("rotate_secs", max_age_secs),
            ("keep_files", keep),
        ] {
            if value == Some(0) {
                return Err((key, "expected at least 1 (leave it out for none)".into()));
            }
        }
        if keep.is_some() && max_bytes.is_none() && max_age_secs.is_none() {
            return Err((
                "keep_files",
                "needs rotate_bytes or rotate_secs: without rotation there are no old files".into(),
            ));
        }
        Ok(Rotation {
            max_bytes,
            max_age_ms: max_age_secs.map(|s| s.saturating_mul(1000)),
            keep,
        })
    }

    /// Does a file of `len` bytes, started at `started_ms`, give way to a
    /// new one before the next write at `now_ms`? An empty file never does.
    pub fn due(&self, len: u64, started_ms: u64, now_ms: u64) -> bool {
        len > 0
            && (self.max_bytes.is_some_and(|m| len >= m)
                || self
                    .max_age_ms
                    .is_some_and(|a| now_ms.saturating_sub(started_ms) >= a))
    }

    /// The numbers of rotated files to remove once file `current` is the
    /// active one (those before the last `keep` rotated files).
    pub fn expired(&self, current: u64) -> std::ops::Range<u64> {
        match self.keep {
            Some(keep) => 1..current.saturating_sub(keep).max(1),
            None => 1..1,
        }
    }
}

fn sync_dir(path: &Path) -> std::io::Result<()> {
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => File::open(dir).and_then(|d| d.sync_all()),
        None => File::open(".").and_then(|d| d.sync_all()),
    }
}

/// The last file rotated out of the active file `path`, if any: its
/// number and its chain's end. An active file that holds no whole line
/// beside rotated files is that file's successor, whose header a crash
/// kept from the disk (the header is written after the rename, and synced
/// a sync window later) or which a crash kept from being created at all:
/// it goes on from here, rather than start a chain of its own that would
/// break the set and, at the next rotation, find its number taken.
pub(super) fn last_rotated(path: &Path) -> Result<Option<(u64, VerifyReport)>, AuditError> {
    let Some(base) = path.file_name().and_then(|n| n.to_str()) else {
        return Ok(None);
    };
    let set = LogSet::find(path)?;
    // Regular files only: not a directory or a link named like one.
    let regular = |file: &Path| std::fs::symlink_metadata(file).is_ok_and(|m| m.is_file());
    let last = set.files().iter().rev().find_map(|file| {
        let name = file.file_name()?.to_str()?;
        rotated_number(base, name)
            .filter(|_| regular(file))
            .map(|n| (n, file))
    });
    let Some((number, file)) = last else {
        return Ok(None);
    };
    let bytes = std::fs::read(file).map_err(|source| AuditError::Io {
        path: file.clone(),
        source,
    })?;
    let report = verify_bytes(&bytes).map_err(|broken| AuditError::Broken {
        path: file.clone(),
        broken,
    })?;
    // The file says which of the set it is (its header; the first has
    // none): one that is not what its name says (a copy, a renamed or
    // stray file) is not gone on from.
    if report.last_file != number || bytes.is_empty() || number.checked_add(1).is_none() {
        return Err(AuditError::Set {
            path: file.clone(),
            why: format!(
                "the active file is empty after a rotation, and the last rotated file is not file {number} of this set (it is {}); move it away or restore the set",
                if bytes.is_empty() { "empty".to_string() } else { format!("file {}", report.last_file) }
            ),
        });
    }
    Ok(Some((number, report)))
}

impl AuditLog {
    /// Starts the active file as the successor of rotated file `number`
    /// ([`last_rotated`]): its header first, chained to that file's last
    /// line, synced.
    pub(super) fn resume_after(
        &mut self,
        number: u64,
        last: &VerifyReport,
        now_ms: u64,
    ) -> Result<(), AuditError> {
        self.file_number = number + 1;
        self.head.lines = 0;
        self.head.hash.clone_from(&last.last_hash);
        self.started_ms = now_ms;
        self.write_lines(&[Record::Header(HeaderRecord {
            time: rfc3339_utc(now_ms),
            file: self.file_number,
            previous_lines: last.file_lines,
        })])?;
        self.sync()
    }

    /// Moves to the next file (see the module's doc).
    pub(super) fn rotate(&mut self, now_ms: u64) -> Result<(), AuditError> {
        let io = |source| AuditError::Io {
            path: self.path.clone(),
            source,
        };
        if self.torn {
            // A failed write whose cut-back failed too left part of a line
            // at the end: cut it now (before the sync below makes the cut
            // durable), or stay in this file. A file rotated out is never
            // opened to be repaired.
            self.file.set_len(self.len).map_err(io)?;
            self.torn = false;
        }
        // Everything written to the old file is durable before the switch,
        // so the sync thread may move on to the new file.
        if let Err(source) = self.file.sync_data() {
            self.sync_failed = true;
            return Err(io(source));
        }
        let rotated = rotated_path(&self.path, self.file_number);
        if rotated.exists() {
            return Err(AuditError::Set {
                path: rotated,
                why: "a rotated file of this number exists already; not overwriting it".into(),
            });
        }
        std::fs::rename(&self.path, &rotated).map_err(io)?;
        let created = OpenOptions::new()
            .read(true)
            .append(true)
            .create_new(true)
            .mode(0o600)
            .open(&self.path)
            .and_then(|f| sync_dir(&self.path).map(|()| f));
        let file = match created {
            Ok(file) => file,
            Err(source) => {
                // Back to the old file under its name, to try again later.
                let _ = std::fs::rename(&rotated, &self.path);
                return Err(io(source));
            }
        };
        let previous_lines = self.head.lines;
        let old_file = std::mem::replace(&mut self.file, Arc::new(file));
        let (old_len, old_torn, old_started) = (self.len, self.torn, self.started_ms);
        self.len = 0;
        self.torn = false;
        self.file_number += 1;
        self.started_ms = now_ms;
        // The chain runs on from the previous file's last line.
        self.head.lines = 0;
        let header = self.write_lines(&[Record::Header(HeaderRecord {
            time: rfc3339_utc(now_ms),
            file: self.file_number,
            previous_lines,
        })]);
        if let Err(error) = header {
            // A file whose first line is not its header breaks the set (it
            // could not be opened again): back to the old file under its
            // name, over the new one, which holds nothing; the next write
            // rotates again. Should that rename fail too, the new file
            // stays, and opening the set names it.
            if std::fs::rename(&rotated, &self.path).is_ok() {
                let _ = sync_dir(&self.path);
                self.file = old_file;
                (self.len, self.torn, self.started_ms) = (old_len, old_torn, old_started);
                self.file_number -= 1;
                self.head.lines = previous_lines;
            }
            return Err(error);
        }
        self.remove_expired();
        Ok(())
    }

    /// Retention: removes the rotated files before the last `keep`.
    fn remove_expired(&self) {
        for n in self.rotation.expired(self.file_number) {
            let old = rotated_path(&self.path, n);
            match std::fs::remove_file(&old) {
                Ok(()) => tracing::info!(file = %old.display(), "audit retention: removed"),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(file = %old.display(), error = %e, "audit retention: cannot remove")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_by_size_or_age_never_when_empty() {
        let r = Rotation::new(Some(100), Some(60), None).unwrap();
        assert!(!r.due(99, 0, 59_999));
        assert!(r.due(100, 0, 0));
        assert!(r.due(1, 0, 60_000));
        assert!(!r.due(0, 0, 1_000_000));
        assert!(!Rotation::default().due(u64::MAX, 0, u64::MAX));
    }

    #[test]
    fn retention_keeps_the_last_files() {
        let r = Rotation::new(Some(1), None, Some(2)).unwrap();
        // Active file 5: rotated 1..=4 exist; keep 3 and 4.
        assert_eq!(r.expired(5), 1..3);
        assert_eq!(r.expired(2), 1..1);
        assert_eq!(Rotation::new(Some(1), None, None).unwrap().expired(9), 1..1);
    }

    #[test]
    fn nonsense_is_refused() {
        let key = |r: Result<Rotation, (&'static str, String)>| r.unwrap_err().0;
        assert_eq!(key(Rotation::new(Some(0), None, None)), "rotate_bytes");
        assert_eq!(key(Rotation::new(None, Some(0), None)), "rotate_secs");
        assert_eq!(key(Rotation::new(Some(1), None, Some(0))), "keep_files");
        assert_eq!(key(Rotation::new(None, None, Some(3))), "keep_files");
    }
}
