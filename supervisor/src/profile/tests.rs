use std::collections::HashMap;

use super::*;

struct MapSource(HashMap<&'static str, &'static str>);

impl ProfileSource for MapSource {
    fn load(&self, name: &str) -> Result<(String, String), ProfileError> {
        self.0
            .get(name)
            .map(|t| (format!("test:{name}"), t.to_string()))
            .ok_or_else(|| ProfileError::NotFound {
                name: name.to_string(),
                searched: "test".to_string(),
            })
    }
}

fn source(entries: &[(&'static str, &'static str)]) -> MapSource {
    MapSource(entries.iter().copied().collect())
}

#[test]
fn shipped_profiles_resolve() {
    let src = DirSource { dirs: vec![] };
    for (name, _) in EMBEDDED {
        let p = resolve(&src, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(p.layers.last().map(String::as_str), Some(*name));
        assert!(
            p.require.landlock && p.require.seccomp,
            "{name} must require both"
        );
        assert!(
            p.filesystem.read_exec.contains(&PathBuf::from("/usr")),
            "{name}"
        );
    }
    let web = resolve(&src, "teams/web").unwrap();
    let platform = resolve(&src, "teams/platform").unwrap();
    assert!(!web.filesystem.writable_exec && platform.filesystem.writable_exec);
    assert!(platform.require.cgroup_limits && !web.require.cgroup_limits);
    assert!(platform.limits.memory_mib > web.limits.memory_mib);
}

#[test]
fn extends_merges_base_first() {
    let src = source(&[
        (
            "base",
            r#"
            [filesystem]
            read_exec = ["/usr"]
            read = ["/etc/ssl/certs"]
            [env]
            pass = ["TERM"]
            [env.set]
            PATH = "/usr/bin"
            HOME = "/tmp"
            [limits]
            memory_mib = 100
            pids = 50
            "#,
        ),
        (
            "child",
            r#"
            extends = "base"
            [filesystem]
            read_exec = ["/opt/tool", "/usr"]
            [env.set]
            PATH = "/opt/tool/bin:/usr/bin"
            [limits]
            pids = 20
            work_dir_size = "2G"
            [require]
            cgroup_limits = true
            work_dir_size = true
            "#,
        ),
    ]);
    let p = resolve(&src, "child").unwrap();
    assert_eq!(p.layers, ["base", "child"]);
    assert_eq!(
        p.filesystem.read_exec,
        [PathBuf::from("/usr"), PathBuf::from("/opt/tool")]
    );
    assert_eq!(p.env.set["PATH"], "/opt/tool/bin:/usr/bin");
    assert_eq!(p.env.set["HOME"], "/tmp");
    assert_eq!(p.limits.memory_mib, Some(100));
    assert_eq!(p.limits.pids, Some(20));
    assert!(p.require.cgroup_limits);
    assert_eq!(p.limits.work_dir_size, Some(2 << 30));
    assert!(p.require.work_dir_size);
    assert!(p.require.landlock, "defaults to required");
}

#[test]
fn invalid_profiles_are_refused_with_the_key_named() {
    let cases: &[(&str, &str)] = &[
        (
            "[filesystem]\nread_exec = [\"usr\"]",
            "filesystem.read_exec",
        ),
        ("[filesystem]\nread = [\"/etc/../root\"]", "filesystem.read"),
        ("[filesystem]\nread = [\"/work/x\"]", "filesystem.read"),
        ("[filesystem]\nread_exec = [\"/\"]", "filesystem.read_exec"),
        (
            "[filesystem]\nread_exec = [\"/proc\"]",
            "filesystem.read_exec",
        ),
        (
            "[filesystem]\nread = [\"/a\"]\nread_exec = [\"/a\"]",
            "filesystem.read",
        ),
        ("[limits]\npids = 0", "limits.pids"),
        ("[limits]\npids = 2", "limits.pids"),
        ("[limits]\nmemory_mib = 0", "limits.memory_mib"),
        ("[env]\npass = [\"BAD NAME\"]", "env"),
        ("[env.set]\n\"1X\" = \"v\"", "env"),
        ("[network]\ntunnels = [\"no-port\"]", "network.tunnels"),
        ("[network]\ntunnels = [\"host:0\"]", "network.tunnels"),
        ("[network]\nrule_sets = [\"\"]", "network.rule_sets"),
        ("[network]\ntransparent = true", "network.transparent_hosts"),
        (
            "[network]\ntransparent = true\ntransparent_hosts = [\"localhost\"]",
            "network.transparent_hosts",
        ),
        (
            "[network]\ntransparent_hosts = [\"127.0.0.1\"]",
            "network.transparent_hosts",
        ),
        (
            "[network]\ntransparent_hosts = [\"API.github.com\"]",
            "network.transparent_hosts",
        ),
        ("[network]\ntransparent = 1", "transparent"),
        ("[worker]\ncommand = [\"\"]", "worker.command"),
        ("[limits]\nwork_dir_size = \"1M\"", "limits.work_dir_size"),
        ("[limits]\nwork_dir_size = 2048", "work_dir_size"),
        ("[require]\nwork_dir_size = true", "require.work_dir_size"),
        // Unknown keys, at any level.
        ("surprise = 1", "surprise"),
        ("[limits]\nmemroy_mib = 1", "memroy_mib"),
        ("[filesystem]\nread_write = [\"/x\"]", "read_write"),
    ];
    for (text, key) in cases {
        let src = source(&[("p", text)]);
        let err = resolve(&src, "p").unwrap_err().to_string();
        assert!(
            err.contains(key),
            "{text:?}: error `{err}` does not name `{key}`"
        );
        assert!(err.contains("test:p") || err.contains('p'), "{err}");
    }
}

#[test]
fn extends_cycles_and_missing_parents_are_errors() {
    let src = source(&[("a", "extends = \"b\""), ("b", "extends = \"a\"")]);
    assert!(matches!(
        resolve(&src, "a"),
        Err(ProfileError::ExtendsCycle { .. })
    ));
    let src = source(&[("a", "extends = \"a\"")]);
    assert!(matches!(
        resolve(&src, "a"),
        Err(ProfileError::ExtendsCycle { .. })
    ));
    let src = source(&[("a", "extends = \"nope\"")]);
    assert!(matches!(
        resolve(&src, "a"),
        Err(ProfileError::NotFound { .. })
    ));
}

#[test]
fn profile_names_cannot_escape_the_directory() {
    let src = DirSource {
        dirs: vec![PathBuf::from("/nonexistent")],
    };
    for name in ["../etc/passwd", "/etc/passwd", "a/../../b", "", "a b"] {
        assert!(
            matches!(src.load(name), Err(ProfileError::Invalid { .. })),
            "{name:?} accepted"
        );
    }
    assert!(src.load("default").is_ok(), "built-in fallback");
}

#[test]
fn resolved_profiles_print_as_toml_and_json() {
    let p = resolve(&DirSource { dirs: vec![] }, "default").unwrap();
    let toml = p.to_toml().unwrap();
    assert!(toml.contains("layers = [\"base\", \"default\"]"), "{toml}");
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["limits"]["pids"], 512);
}
