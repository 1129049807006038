//! The router model's world: the model emulator behind an in-process
//! proxy holding its key (credential `model`, the shipped `model-api` rule
//! set, `api.openai.com` routed to the emulator), with a router identity
//! that has `model-api` and one that has not. For the router model's tests
//! and its benchmark.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use gatehouse_emulators::{ModelEmulator, ModelHandle, ModelOptions};
use gatehouse_proxy::audit::AuditLog;
use gatehouse_proxy::ca::CertificateAuthority;
use gatehouse_proxy::credentials::{CredentialSpec, Credentials};
use gatehouse_proxy::rules::{RuleBook, RuleSet};
use gatehouse_proxy::server::audit_writer::AuditWriter;
use gatehouse_proxy::server::{IdentitySpec, Proxy, ProxyParts};
use gatehouse_proxy::upstream::{UpstreamOverride, Upstreams};

pub struct World {
    pub rt: tokio::runtime::Runtime,
    pub dir: tempfile::TempDir,
    pub model: ModelHandle,
    pub key: String,
    pub proxy: Arc<Proxy>,
    pub proxy_ca: PathBuf,
    pub audit: PathBuf,
    /// The router's identity with `model-api`.
    pub socket: PathBuf,
    /// An identity without it (a positive control for the refusal).
    pub other_socket: PathBuf,
}

pub fn start(options: ModelOptions) -> World {
    let dir = tempfile::tempdir().unwrap();
    let key = crate::random::token("sk-test-");
    let model = ModelEmulator::start(options.api_key(&key)).unwrap();
    let model_ca = dir.path().join("model-ca.pem");
    model.write_ca_pem(&model_ca).unwrap();
    let key_file = dir.path().join("model.key");
    std::fs::write(&key_file, &key).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let proxy_ca = dir.path().join("proxy-ca.pem");
    let audit = dir.path().join("audit.jsonl");
    let (proxy, socket, other_socket) = rt.block_on(async {
        let upstreams = Upstreams::new(&[UpstreamOverride {
            host: "api.openai.com".into(),
            url: model.base_url(),
            ca_file: Some(model_ca.clone()),
        }])
        .unwrap();
        let specs = BTreeMap::from([("model".to_string(), CredentialSpec::Bearer { key_file })]);
        let credentials = Credentials::load(&specs, &upstreams).unwrap();
        let ca =
            CertificateAuthority::load_or_generate(&proxy_ca, &dir.path().join("ca.key")).unwrap();
        let shipped = crate::bin::repo_path("sandbox-profiles/rules/model-api.toml");
        let text = std::fs::read_to_string(&shipped).unwrap();
        let book = RuleBook::new([RuleSet::parse("model-api.toml", &text).unwrap()]).unwrap();
        let proxy = Proxy::new(ProxyParts {
            ca: Arc::new(ca),
            upstreams,
            policy: Arc::new(book),
            credentials: Arc::new(credentials),
            audit: AuditWriter::start(AuditLog::open(&audit).unwrap()).unwrap(),
            socket_dir: dir.path().join("sockets"),
            limits: gatehouse_proxy::limits::Limits::default(),
        })
        .unwrap();
        let identity = |name: &str, rule_sets: Vec<String>| IdentitySpec {
            name: name.into(),
            rule_sets,
            tunnel_hosts: Vec::new(),
            variables: BTreeMap::new(),
            socket: None,
            peer_uid: None,
        };
        let socket = proxy
            .add_identity(identity("router-model", vec!["model-api".into()]))
            .unwrap();
        let other = proxy
            .add_identity(identity("router-other", Vec::new()))
            .unwrap();
        (proxy, socket, other)
    });
    World {
        rt,
        dir,
        model,
        key,
        proxy,
        proxy_ca,
        audit,
        socket,
        other_socket,
    }
}
