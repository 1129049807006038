//! A job's workspace before launch: the work dir and log dir, the rendered
//! prompt in `.gatehouse/` (never following a symlink the worker planted in
//! an earlier job), and, started by root, the work dir given a filesystem
//! of its own when the profile limits its size, and given to the worker
//! user.

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::config::{Config, LauncherKind};
use super::prompts::{assemble, render};
use super::service::{io, ServiceError, WORKER_USER};
use super::store::JobRecord;

/// Where the prompt is, relative to the work dir.
pub const PROMPT_PATH: &str = ".gatehouse/prompt.md";

/// Creates the job's work and log dirs, writes its prompt and gives the
/// work dir to the worker user. Returns the prompt's path relative to the
/// work dir.
pub fn prepare(config: &Config, job: &JobRecord) -> Result<String, ServiceError> {
    mkdir_private(&job.work_dir)?;
    give_filesystem(config, job)?;
    if let Some(logs) = job.stdout_log.parent() {
        mkdir_private(logs)?;
    }
    let prompt_path = write_prompt(config, job)?;
    give_to_worker(config, &job.work_dir)?;
    Ok(prompt_path)
}

/// Creates `dir` and its missing parents, mode 0700. The mode is set, not
/// left to the umask: a stricter umask inherited from whoever started the
/// supervisor (0177, say) would make it 0600, a directory the worker can
/// list but not enter.
pub fn mkdir_private(dir: &Path) -> Result<(), ServiceError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
        .map_err(io(format!("creating {}", dir.display())))
}

/// The variables a prompt template may use.
pub fn prompt_vars(job: &JobRecord) -> BTreeMap<&'static str, String> {
    let spec = &job.spec;
    let mut vars: BTreeMap<&str, String> = BTreeMap::new();
    vars.insert("ticket", spec.ticket.clone());
    vars.insert("job", job.id.clone());
    vars.insert("team", spec.team.clone());
    vars.insert(
        "repo",
        spec.variables.get("repo").cloned().unwrap_or_default(),
    );
    vars
}

/// Started by root, with a profile that sets `limits.work_dir_size`: the
/// ticket's work dir becomes a filesystem of that size, made by the
/// ticket's first job and reused by the later ones (see
/// [`crate::workdir_fs`]). Rootless nothing can be mounted; `sandbox run`
/// then warns, or refuses when the profile requires the limit.
fn give_filesystem(config: &Config, job: &JobRecord) -> Result<(), ServiceError> {
    if config.launcher != LauncherKind::Sandbox || !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let profile = super::service::resolve_profile(config, &job.spec.profile)?;
    let Some(bytes) = profile.limits.work_dir_size else {
        return Ok(());
    };
    let image = crate::workdir_fs::image_for(&job.work_dir);
    if crate::workdir_fs::ensure(&job.work_dir, &image, bytes)? {
        tracing::info!(ticket = %job.spec.ticket, bytes, "made the ticket's work dir filesystem");
    }
    // The filesystem's root, like the directory it covers: private.
    std::fs::set_permissions(&job.work_dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io(format!("chmod {}", job.work_dir.display())))
}

/// Started by root, the sandbox runs the worker as an unprivileged host
/// user: the work dir (not its contents, which the worker created) and
/// the prompt files become that user's.
fn give_to_worker(config: &Config, work_dir: &Path) -> Result<(), ServiceError> {
    if config.launcher != LauncherKind::Sandbox || !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let user = crate::accounts::user(WORKER_USER)
        .ok()
        .flatten()
        .ok_or_else(|| ServiceError::Io {
            what: format!("looking up the worker user {WORKER_USER}"),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })?;
    let gatehouse_dir = work_dir.join(".gatehouse");
    for path in [
        work_dir.to_owned(),
        gatehouse_dir.clone(),
        gatehouse_dir.join("prompt.md"),
        gatehouse_dir.join(".gitignore"),
    ] {
        std::os::unix::fs::lchown(&path, Some(user.uid), Some(user.gid))
            .map_err(io(format!("giving {} to {WORKER_USER}", path.display())))?;
    }
    Ok(())
}

/// Renders the prompt into `.gatehouse/prompt.md` in the work dir and
/// returns its path relative to the work dir.
fn write_prompt(config: &Config, job: &JobRecord) -> Result<String, ServiceError> {
    let prompt = render_prompt(config, job)?;
    let dir = job.work_dir.join(".gatehouse");
    ensure_real_dir(&dir)?;
    // `.gitignore` of `*` keeps the prompt out of the worker's commits.
    for (name, text) in [(".gitignore", "*\n"), ("prompt.md", prompt.as_str())] {
        replace_file(&dir.join(name), text)?;
    }
    Ok(PROMPT_PATH.into())
}

/// `work.md`, the team's prompt if there is one, and the task.
fn render_prompt(config: &Config, job: &JobRecord) -> Result<String, ServiceError> {
    let spec = &job.spec;
    let vars = prompt_vars(job);
    let read =
        |p: &Path| std::fs::read_to_string(p).map_err(io(format!("reading {}", p.display())));
    let work_path = config.prompts_dir.join("work.md");
    let work = render("work.md", &read(&work_path)?, &vars)?;
    let team_path = config
        .prompts_dir
        .join("team")
        .join(format!("{}.md", spec.team));
    let team = match team_path.exists() {
        true => Some(render(
            &format!("team/{}.md", spec.team),
            &read(&team_path)?,
            &vars,
        )?),
        false => None,
    };
    Ok(assemble(&work, team.as_deref(), &spec.task))
}

/// Makes `dir` a real directory. The work dir belongs to the worker, which
/// may have planted symlinks here in an earlier job: never follow one (no
/// job of this ticket is running now, so nothing can change between check
/// and create).
fn ensure_real_dir(dir: &Path) -> Result<(), ServiceError> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => std::fs::remove_file(dir).map_err(io(format!("removing {}", dir.display())))?,
        Err(_) => std::fs::create_dir(dir).map_err(io(format!("creating {}", dir.display())))?,
    }
    if !dir.exists() {
        std::fs::create_dir(dir).map_err(io(format!("creating {}", dir.display())))?;
    }
    Ok(())
}

/// Writes `text` to a new file at `path` (mode 0644), removing what was
/// there first: a symlink is removed, never written through.
fn replace_file(path: &Path, text: &str) -> Result<(), ServiceError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(io(format!("removing {}", path.display()))(e))
        }
        _ => {}
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .map_err(io(format!("creating {}", path.display())))?;
    std::io::Write::write_all(&mut file, text.as_bytes())
        .map_err(io(format!("writing {}", path.display())))
}

#[cfg(test)]
mod tests;
