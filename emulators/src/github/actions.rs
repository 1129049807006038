//! GitHub Actions beyond runs and jobs: the workflows, read from the
//! repository's `.github/workflows` files on the default branch (GitHub's
//! `workflow` schema, `GET …/actions/workflows[/{id}]`), and a run's logs
//! as GitHub serves them, a zip archive with one text file per job
//! (`GET …/actions/runs/{id}/logs` → 302 → the archive).
//!
//! No zip crate is in the dependency tree, so the archive is written here:
//! entries are stored (method 0, no compression), which every unzip reads.

use std::path::Path;

use serde_json::{json, Value};

use super::contents;
use super::model::{node_id, workflow_id, Repo};
use crate::time::iso8601;

/// A workflow file on the default branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkflowFile {
    /// `.github/workflows/ci.yml`.
    pub path: String,
    /// Its top-level `name:`, or the path when it has none (as GitHub shows it).
    pub name: String,
    /// When the file was first and last committed (Unix seconds).
    pub created_at: u64,
    pub updated_at: u64,
}

/// The directory GitHub reads workflows from.
const WORKFLOWS_DIR: &str = ".github/workflows";

/// The workflow files (`*.yml`, `*.yaml`) of `branch`, by path; `None`
/// when the branch does not resolve (an empty repository). Blocking: runs git.
pub(crate) fn workflow_files(git_dir: &Path, branch: &str) -> Option<Vec<WorkflowFile>> {
    let commit = contents::commit_id(git_dir, branch)?;
    let listing = contents::git(
        git_dir,
        &["ls-tree", "-z", &commit, "--", &format!("{WORKFLOWS_DIR}/")],
    )
    .unwrap_or_default();
    let mut files = Vec::new();
    for entry in listing.split(|b| *b == 0).filter(|e| !e.is_empty()) {
        let entry = String::from_utf8_lossy(entry);
        let Some((meta, path)) = entry.split_once('\t') else {
            continue;
        };
        let mut meta = meta.split(' ');
        let (Some(_mode), Some("blob"), Some(blob)) = (meta.next(), meta.next(), meta.next())
        else {
            continue;
        };
        if !(path.ends_with(".yml") || path.ends_with(".yaml")) {
            continue;
        }
        let text = contents::git(git_dir, &["cat-file", "blob", blob]).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        let times = contents::git(git_dir, &["log", "--format=%ct", &commit, "--", path])
            .map(|out| String::from_utf8_lossy(&out).into_owned())
            .unwrap_or_default();
        let times: Vec<u64> = times
            .lines()
            .filter_map(|t| t.trim().parse().ok())
            .collect();
        files.push(WorkflowFile {
            path: path.to_owned(),
            name: workflow_name(&text).unwrap_or_else(|| path.to_owned()),
            created_at: times.last().copied().unwrap_or(0),
            updated_at: times.first().copied().unwrap_or(0),
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Some(files)
}

/// A workflow's top-level `name:` (quotes and a trailing comment taken
/// off); `None` without one. Only that key is read, not the whole YAML.
pub(crate) fn workflow_name(yaml: &str) -> Option<String> {
    let line = yaml.lines().find_map(|l| l.strip_prefix("name:"))?;
    let value = line.trim();
    let unquoted = match value.as_bytes().first() {
        Some(q @ (b'"' | b'\'')) => {
            let rest = &value[1..];
            rest.find(char::from(*q)).map(|end| &rest[..end])?
        }
        _ => value.split(" #").next().unwrap_or(value).trim(),
    };
    (!unquoted.is_empty()).then(|| unquoted.to_owned())
}

/// The workflow `wanted` names: its numeric id or its file name
/// (`ci.yml`), as GitHub takes `workflow_id`.
pub(crate) fn find<'a>(
    files: &'a [WorkflowFile],
    repo_id: u64,
    wanted: &str,
) -> Option<&'a WorkflowFile> {
    files.iter().find(|f| {
        wanted.parse::<u64>().ok() == Some(workflow_id(repo_id, &f.path))
            || f.path.rsplit('/').next() == Some(wanted)
    })
}

/// A workflow in GitHub's `workflow` shape.
pub(crate) fn workflow_json(repo: &Repo, branch: &str, f: &WorkflowFile) -> Value {
    let id = workflow_id(repo.id, &f.path);
    let file = f.path.rsplit('/').next().unwrap_or(&f.path);
    json!({
        "id": id,
        "node_id": node_id("W", id),
        "name": f.name,
        "path": f.path,
        "state": "active",
        "created_at": iso8601(f.created_at),
        "updated_at": iso8601(f.updated_at),
        "url": format!("{}/actions/workflows/{id}", repo.api_url()),
        "html_url": format!("{}/blob/{branch}/{}", repo.html_url(), f.path),
        "badge_url": format!("{}/actions/workflows/{file}/badge.svg", repo.html_url()),
    })
}

// === the log archive ===

/// A zip archive of `files` (name, content), every entry stored, dated
/// `unix_seconds` (UTC; zip has no zone). Names are marked UTF-8.
pub(crate) fn zip_stored(files: &[(String, Vec<u8>)], unix_seconds: u64) -> Vec<u8> {
    let (time, date) = dos_time(unix_seconds);
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in files {
        let offset = out.len() as u32;
        let crc = crc32(data);
        let size = data.len() as u32;
        // Local file header.
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        let common = |v: &mut Vec<u8>| {
            v.extend_from_slice(&20u16.to_le_bytes()); // version needed: 2.0
            v.extend_from_slice(&0x0800u16.to_le_bytes()); // flags: UTF-8 names
            v.extend_from_slice(&0u16.to_le_bytes()); // method: stored
            v.extend_from_slice(&time.to_le_bytes());
            v.extend_from_slice(&date.to_le_bytes());
            v.extend_from_slice(&crc.to_le_bytes());
            v.extend_from_slice(&size.to_le_bytes()); // compressed
            v.extend_from_slice(&size.to_le_bytes()); // uncompressed
            v.extend_from_slice(&(name.len() as u16).to_le_bytes());
            v.extend_from_slice(&0u16.to_le_bytes()); // extra field length
        };
        common(&mut out);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);
        // Its central directory record.
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        central.extend_from_slice(&20u16.to_le_bytes()); // made by: 2.0
        common(&mut central);
        central.extend_from_slice(&0u16.to_le_bytes()); // comment length
        central.extend_from_slice(&0u16.to_le_bytes()); // disk number
        central.extend_from_slice(&0u16.to_le_bytes()); // internal attributes
        central.extend_from_slice(&0u32.to_le_bytes()); // external attributes
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let central_offset = out.len() as u32;
    let count = files.len() as u16;
    out.extend_from_slice(&central);
    // End of central directory.
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes()); // this disk
    out.extend_from_slice(&0u16.to_le_bytes()); // disk with the directory
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&central_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes()); // comment length
    out
}

/// MS-DOS time and date (2-second resolution, from 1980).
fn dos_time(unix_seconds: u64) -> (u16, u16) {
    let (year, month, day) = crate::time::civil_from_days((unix_seconds / 86_400) as i64);
    let secs = unix_seconds % 86_400;
    let time = ((secs / 3600) << 11) | (((secs / 60) % 60) << 5) | ((secs % 60) / 2);
    let year = (year.clamp(1980, 2107) - 1980) as u16;
    let date = (year << 9) | ((month as u16) << 5) | day as u16;
    (time as u16, date)
}

/// CRC-32 (IEEE 802.3, reflected, as zip uses), bit by bit: logs are small.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for byte in data {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_the_standard_one() {
        // The check value of CRC-32/ISO-HDLC.
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn workflow_names_are_read_from_the_top_level_key() {
        for (yaml, name) in [
            ("name: CI\non: push\n", Some("CI")),
            ("on: push\nname: \"Build # all\"\n", Some("Build # all")),
            ("name: 'Lint'\n", Some("Lint")),
            ("name: Test # the suite\n", Some("Test")),
            ("jobs:\n  x:\n    name: inner\n", None),
            ("name:\n", None),
        ] {
            assert_eq!(workflow_name(yaml).as_deref(), name, "{yaml:?}");
        }
    }

    #[test]
    fn dos_dates_count_from_1980() {
        // 2026-12-03 14:05:26 UTC.
        let (time, date) = dos_time(1_796_306_726);
        assert_eq!(date >> 9, 46);
        assert_eq!((date >> 5) & 0xf, 12);
        assert_eq!(date & 0x1f, 3);
        assert_eq!(time >> 11, 14);
        assert_eq!((time >> 5) & 0x3f, 5);
        assert_eq!((time & 0x1f) * 2, 26);
    }

    #[test]
    fn an_archive_is_read_back_by_unzip() {
        let files = vec![
            ("0_test.txt".to_owned(), b"ok\n".to_vec()),
            ("1_lint \u{e9}.txt".to_owned(), b"fine\nall\n".to_vec()),
        ];
        let zip = zip_stored(&files, 1_796_306_726);
        assert!(zip.starts_with(b"PK\x03\x04"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs.zip");
        std::fs::write(&path, &zip).unwrap();
        // `unzip -t` checks every entry's CRC; skip only where it is absent.
        let Ok(out) = std::process::Command::new("unzip")
            .arg("-t")
            .arg(&path)
            .output()
        else {
            eprintln!("SKIP: no unzip to read the archive back");
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("No errors detected"), "{text}");
        let out = std::process::Command::new("unzip")
            .arg("-p")
            .arg(&path)
            .arg("1_lint*")
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"fine\nall\n");
    }
}
