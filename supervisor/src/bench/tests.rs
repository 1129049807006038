use super::*;

#[test]
fn summary_uses_nearest_rank() {
    let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
    let s = summarize(&samples).unwrap();
    assert_eq!(s.median_ms, 50.0);
    assert_eq!(s.p95_ms, 95.0);
    assert_eq!(s.min_ms, 1.0);
    assert!(summarize(&[]).is_none());
    let one = summarize(&[Duration::from_millis(3)]).unwrap();
    assert_eq!((one.median_ms, one.p95_ms), (3.0, 3.0));
}

#[test]
fn the_unlimited_variant_keeps_the_mounts_and_drops_the_limits() {
    let src = crate::profile::DirSource { dirs: vec![] };
    let default = crate::profile::resolve(&src, "default").unwrap();
    let text = without_cgroup_limits(&default);
    let p = crate::profile::resolve_text(&src, "unlimited", "test", &text).unwrap();
    assert_eq!(p.filesystem, default.filesystem);
    assert_eq!(p.env, default.env);
    assert_eq!(
        (p.limits.memory_mib, p.limits.pids, p.limits.cpu_percent),
        (None, None, None)
    );
}

#[test]
fn shuffles_are_permutations_and_vary() {
    let mut rng = XorShift(1);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..50 {
        let mut v: Vec<usize> = (0..5).collect();
        rng.shuffle(&mut v);
        let mut sorted = v.clone();
        sorted.sort();
        assert_eq!(sorted, [0, 1, 2, 3, 4]);
        seen.insert(v);
    }
    assert!(seen.len() > 10, "only {} orders", seen.len());
}

#[test]
fn the_contenders_time_the_same_command_each() {
    let run = GatehouseRun {
        work: Path::new("/s/work"),
        proxy_socket: Path::new("/s/proxy.sock"),
        proxy_dir: Path::new("/s/identity"),
        unlimited_profile: Path::new("/s/unlimited.toml"),
        transparent_profile: Path::new("/s/transparent.toml"),
    };
    let mut options = BenchOptions {
        iterations: 1,
        warmup: 0,
        launcher: "/bin/gatehouse".into(),
        against: None,
    };
    let list = contenders(&options, &["--unshare-all".into()], &run);
    let names: Vec<&str> = list.iter().map(|c| c.name).collect();
    assert_eq!(
        names,
        [
            "fork/exec",
            "bwrap",
            "gatehouse",
            "gatehouse-no-relay",
            "gatehouse-no-cgroups",
            "gatehouse-proxy-dir",
            "gatehouse-transparent"
        ]
    );
    assert_eq!(list[0].program, Path::new("/bin/true"));
    assert!(list[0].args.is_empty());
    for c in &list[1..] {
        assert_eq!(
            c.args.last().map(String::as_str),
            Some("/bin/true"),
            "{}",
            c.name
        );
    }
    assert_eq!(list[1].args, ["--unshare-all", "/bin/true"]);
    let gatehouse = list[2].args.join(" ");
    assert_eq!(
        gatehouse,
        "sandbox run --profile default --quiet --workdir /s/work \
         --proxy-socket /s/proxy.sock -- /bin/true"
    );
    assert!(!list[3].args.contains(&"--proxy-socket".to_string()));
    assert!(list[4]
        .args
        .join(" ")
        .contains("--profile /s/unlimited.toml"));
    assert!(list[5]
        .args
        .join(" ")
        .contains("--profile default --quiet --workdir /s/work --proxy-dir /s/identity --"));
    assert!(list[6].args.join(" ").contains(
        "--profile /s/transparent.toml --quiet --workdir /s/work --proxy-dir /s/identity --"
    ));
    assert!(list[2..7]
        .iter()
        .all(|c| c.program == Path::new("/bin/gatehouse")));
    options.against = Some("/old/gatehouse".into());
    let list = contenders(&options, &[], &run);
    let against = list.last().unwrap();
    assert_eq!(against.name, "gatehouse-against");
    assert_eq!(against.program, Path::new("/old/gatehouse"));
    assert_eq!(against.args, list[2].args);
}

#[test]
fn rollup_fields_are_read() {
    let m =
        parse_rollup("55d0-7ffd ---p 00000000 00:00 0 [rollup]\nRss:  1234 kB\nPss:   567 kB\n");
    assert_eq!(
        m,
        Memory {
            rss_kib: 1234,
            pss_kib: 567
        }
    );
}
