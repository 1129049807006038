use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::*;
use crate::jobs::spec::JobSpec;
use crate::jobs::state::JobState;

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    config: Config,
}

fn fixture(work_md: &str) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_owned();
    let prompts = root.join("prompts");
    std::fs::create_dir_all(prompts.join("team")).unwrap();
    std::fs::write(prompts.join("work.md"), work_md).unwrap();
    let text = format!(
        "state_dir = \"/s\"\napi_socket = \"/a.sock\"\nprompts_dir = \"{}\"\n\
         [sandbox]\ndangerously_unsandboxed = true\n[worker]\ncommand = [\"w\"]\n",
        prompts.display()
    );
    let config = Config::parse(&text, Path::new("t.toml"), Path::new("/")).unwrap();
    Fixture {
        _tmp: tmp,
        root,
        config,
    }
}

fn job(root: &Path, team: &str, variables: &[(&str, &str)]) -> JobRecord {
    let ticket_dir = root.join("tickets").join("tkt_1");
    JobRecord {
        id: "job_1".into(),
        spec: JobSpec {
            ticket: "tkt_1".into(),
            team: team.into(),
            profile: "default".into(),
            rule_sets: vec![],
            tunnel_hosts: vec![],
            variables: variables
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            task: "Fix {{the}} bug.".into(),
            deadline_secs: 60,
            command: None,
        },
        state: JobState::Queued,
        created_at: 0,
        deadline_at: 60_000,
        started_at: None,
        ended_at: None,
        exit: None,
        end_reason: None,
        cancel_requested: false,
        process: None,
        identity: None,
        work_dir: ticket_dir.join("work"),
        stdout_log: ticket_dir.join("logs").join("job_1.stdout.log"),
        stderr_log: ticket_dir.join("logs").join("job_1.stderr.log"),
    }
}

#[test]
fn prompt_vars_table() {
    let root = Path::new("/x");
    let cases: [(&[(&str, &str)], &str); 3] = [
        (&[], ""),
        (&[("repo", "acme/web")], "acme/web"),
        (&[("branch", "main")], ""),
    ];
    for (variables, repo) in cases {
        let vars = prompt_vars(&job(root, "web", variables));
        assert_eq!(vars["repo"], repo, "{variables:?}");
        assert_eq!(vars["ticket"], "tkt_1");
        assert_eq!(vars["job"], "job_1");
        assert_eq!(vars["team"], "web");
        assert_eq!(vars.len(), 4, "no other variable: {vars:?}");
    }
}

#[test]
fn prepare_writes_the_prompt_and_private_dirs() {
    let f = fixture("Work on {{ticket}} in {{repo}}.\n");
    std::fs::write(
        f.config.prompts_dir.join("team/web.md"),
        "Team {{team}}, job {{job}}.",
    )
    .unwrap();
    let job = job(&f.root, "web", &[("repo", "acme/web")]);
    assert_eq!(prepare(&f.config, &job).unwrap(), PROMPT_PATH);
    let prompt = std::fs::read_to_string(job.work_dir.join(PROMPT_PATH)).unwrap();
    assert_eq!(
        prompt,
        "Work on tkt_1 in acme/web.\n\nTeam web, job job_1.\n\n# Your task\n\nFix {{the}} bug.\n"
    );
    let ignore = std::fs::read_to_string(job.work_dir.join(".gatehouse/.gitignore")).unwrap();
    assert_eq!(ignore, "*\n");
    for dir in [&job.work_dir, &job.stdout_log.parent().unwrap().to_owned()] {
        let mode = std::fs::metadata(dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{}", dir.display());
    }
    let mode = std::fs::metadata(job.work_dir.join(PROMPT_PATH))
        .unwrap()
        .mode();
    assert_eq!(mode & 0o777, 0o644);
}

#[test]
fn a_team_without_a_prompt_gets_the_general_one_only() {
    let f = fixture("General.");
    let job = job(&f.root, "nobody", &[]);
    prepare(&f.config, &job).unwrap();
    let prompt = std::fs::read_to_string(job.work_dir.join(PROMPT_PATH)).unwrap();
    assert_eq!(prompt, "General.\n\n# Your task\n\nFix {{the}} bug.\n");
}

#[test]
fn an_unknown_placeholder_stops_the_job() {
    let f = fixture("Hello {{nmae}}.");
    let job = job(&f.root, "web", &[]);
    let err = prepare(&f.config, &job).unwrap_err();
    assert!(matches!(err, ServiceError::Prompt(_)), "{err}");
    assert!(!job.work_dir.join(PROMPT_PATH).exists());
}

#[test]
fn a_planted_gatehouse_dir_symlink_is_replaced_not_followed() {
    let f = fixture("General.");
    let job = job(&f.root, "web", &[]);
    let outside = f.root.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(&job.work_dir).unwrap();
    std::os::unix::fs::symlink(&outside, job.work_dir.join(".gatehouse")).unwrap();
    prepare(&f.config, &job).unwrap();
    let meta = std::fs::symlink_metadata(job.work_dir.join(".gatehouse")).unwrap();
    assert!(meta.is_dir() && !meta.file_type().is_symlink());
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
}

#[test]
fn a_planted_prompt_symlink_is_replaced_not_written_through() {
    let f = fixture("General.");
    let job = job(&f.root, "web", &[]);
    let target = f.root.join("victim");
    std::fs::write(&target, "precious").unwrap();
    let dir = job.work_dir.join(".gatehouse");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&target, dir.join("prompt.md")).unwrap();
    std::os::unix::fs::symlink(&target, dir.join(".gitignore")).unwrap();
    prepare(&f.config, &job).unwrap();
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
    for name in ["prompt.md", ".gitignore"] {
        let meta = std::fs::symlink_metadata(dir.join(name)).unwrap();
        assert!(meta.is_file(), "{name}");
    }
}

/// The mode is set, not left to the umask: a dir that came out 0600 (as a
/// stricter umask makes it) is 0700 afterwards, and one made fresh is 0700.
#[test]
fn a_private_dir_is_0700_whatever_the_umask_left() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("work");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o600)).unwrap();
    mkdir_private(&dir).unwrap();
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let fresh = base.path().join("a/b");
    mkdir_private(&fresh).unwrap();
    let mode = std::fs::metadata(&fresh).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
}
