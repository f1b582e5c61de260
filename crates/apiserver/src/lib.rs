//! skiff's Kubernetes REST API server: the only gateway to the store.
//!
//! Real clients (kubectl, client-go, the Python client, kube-rs) talk to it unmodified over
//! HTTPS (HTTP/1.1 and HTTP/2). The folders follow kube-apiserver's request pipeline; each
//! imports only from the ones below it (and the crate-root modules):
//!
//! - [`server`]: the [`server::handler`] chain every request goes through (authentication →
//!   request info → authorization → handlers, metrics) and the connection plumbing;
//!   [`controlplane`]: the system PriorityClasses, the `kubernetes` Service and its endpoints,
//!   and the node join endpoints.
//! - [`filters`]: max-in-flight flow control, authentication, impersonation, authorization
//!   (RBAC, the Node authorizer) and the installation of the security pipeline.
//! - [`endpoints`]: request parsing, content negotiation, the resource handlers, watch, patch,
//!   discovery, OpenAPI, protobuf bodies, Tables, `pods/log` and the streaming subresources;
//!   [`endpoints::responsewriters`] renders every response.
//! - [`registry`]: the generic store over the [`Backend`], the per-resource strategies,
//!   conversion, typed decoding, validation, managedFields, custom resources, subresources and
//!   computed resources.
//! - [`aggregator`]: API aggregation (APIServices, the proxy to aggregated servers, their
//!   availability and discovery).
//! - [`admission`]: the admission seam and chain (and the controllers that keep what it reads
//!   current).
//! - [`storage`]: the watch caches and their listers.
//! - Crate root: [`resources`] (the table of served resources), [`auth`] (the authentication
//!   and authorization interfaces), [`pki`], [`metrics`], [`util`]; `testing` (behind the
//!   `testing` feature): the in-process server other crates' tests start.
//!
//! [`ApiServer::start`] wires it all together and serves until [`ApiServer::shutdown`].

// `ApiError` (a metav1.Status) is the error of every handler; boxing it everywhere would only
// add noise.
#![allow(clippy::result_large_err)]

pub mod admission;
pub mod aggregator;
pub mod audit;
pub mod auth;
pub mod controlplane;
pub mod endpoints;
pub mod filters;
pub mod metrics;
pub mod metricsserver;
pub mod pki;
pub mod registry;
pub mod resources;
pub mod server;
pub mod storage;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod util;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use skiff_apimachinery::ApiError;
use skiff_store::Backend;
use tokio::net::TcpListener;
use tokio::sync::watch as tokio_watch;
use tokio::task::JoinHandle;
use tower::ServiceExt;

use crate::auth::{Authenticator, CertificateAuthenticator, PeerIdentity};
use crate::metrics::Metrics;
use crate::registry::store::Objects;
use crate::resources::{Registry, ResourceDef};
use crate::storage::watchcache::WatchCache;

/// Events kept per resource for resuming watches.
pub const WATCH_CACHE_EVENTS: usize = 4096;
/// Messages a watcher may fall behind before its stream is ended.
pub const WATCHER_BACKLOG: usize = 1024;
/// The namespaces every cluster has.
pub const SYSTEM_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Shared state of every request handler.
pub struct AppState {
    /// Served resources.
    pub registry: Registry,
    /// The generic object store.
    pub objects: Objects,
    /// Watch caches by storage segment (`ResourceDef::storage`).
    pub caches: HashMap<String, Arc<WatchCache>>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Flips to `true` when the server shuts down (watches end).
    pub shutdown: tokio_watch::Receiver<bool>,
    /// `host:port` advertised in `/api`.
    pub server_address: String,
    /// Who a request comes from.
    pub authenticator: Arc<dyn Authenticator>,
    /// What they may do.
    pub authorizer: Arc<dyn auth::Authorizer>,
    /// TLS settings for calls to kubelets (`pods/log`).
    pub kubelet_tls: Option<Arc<rustls::ClientConfig>>,
    /// Handlers of virtual resources and subresources by (group, resource, subresource).
    pub virtuals: HashMap<(String, String, String), Arc<dyn registry::virtual_resources::VirtualHandler>>,
    /// The audit log (`--audit-policy-file`), if any.
    pub audit: Option<Arc<audit::Auditor>>,
    /// The in-process metrics-server serving `metrics.k8s.io` ([`metricsserver`]), when
    /// [`Config::metric_resolution`] is set.
    pub metrics_server: Option<Arc<metricsserver::MetricsServer>>,
    /// API aggregation: the front proxy's certificate and the aggregated servers' discovery.
    pub aggregator: Arc<aggregator::Aggregator>,
}

impl AppState {
    /// The watch cache of a resource.
    pub fn cache(&self, def: &ResourceDef) -> Result<&Arc<WatchCache>, ApiError> {
        if let Some(custom) = def.custom {
            return Ok(&custom.cache);
        }
        self.caches.get(def.storage).ok_or_else(|| ApiError::internal(format!("no watch cache for {}", def.resource)))
    }
}

/// Where the request handlers' state will be once the server is built (handlers are created
/// before [`AppState`]; it is set once in [`filters::authorization::Installed::start`]).
#[derive(Clone, Default)]
pub struct StateSlot(Arc<OnceLock<Weak<AppState>>>);

impl StateSlot {
    /// Sets the state (only the first call has an effect).
    pub fn set(&self, state: &Arc<AppState>) {
        let _ = self.0.set(Arc::downgrade(state));
    }

    /// The state, if set and still alive.
    pub fn get(&self) -> Option<Arc<AppState>> {
        self.0.get().and_then(Weak::upgrade)
    }
}

/// How to run the API server.
#[derive(Clone)]
pub struct Config {
    /// Data directory; certificates live in `<data_dir>/tls`.
    pub data_dir: PathBuf,
    /// Address to listen on (`0.0.0.0` = all IPv4 addresses).
    pub bind_address: IpAddr,
    /// HTTPS port; 0 picks a free one.
    pub port: u16,
    /// Where to write the admin kubeconfig (`None`: `<data_dir>/kubeconfig.yaml`).
    pub kubeconfig_path: Option<PathBuf>,
    /// Extra subject alternative names for the serving certificate.
    pub extra_sans: Vec<String>,
    /// Authenticator (`None`: client certificates only).
    pub authenticator: Option<Arc<dyn Authenticator>>,
    /// Authorizer (`None`: allow every authenticated request).
    pub authorizer: Option<Arc<dyn auth::Authorizer>>,
    /// Admission (`None`: admit everything).
    pub admission: Option<Arc<dyn admission::seam::Admission>>,
    /// Computed resources (access reviews, TokenRequest) and their handlers.
    pub virtual_resources: Vec<registry::virtual_resources::VirtualResource>,
    /// Enforce RBAC ([`filters::authorization`]): creates the bootstrap policy, authorizes every request from
    /// the RBAC objects, honours `Impersonate-*` headers and serves the access reviews. Replaces
    /// `authorizer` and wraps `authenticator`.
    pub rbac: bool,
    /// `--max-requests-inflight`: read-only requests served at once before 429 (0: no limit;
    /// see [`filters::flowcontrol`]).
    pub max_requests_inflight: usize,
    /// `--max-mutating-requests-inflight`: mutating requests served at once before 429 (0: no
    /// limit).
    pub max_mutating_requests_inflight: usize,
    /// Authentication flags and the admission plug-ins used when `rbac` is on.
    pub security: filters::authorization::SecurityOptions,
    /// `--service-cluster-ip-range` and `--service-node-port-range`: where Services get their
    /// ClusterIPs and node ports.
    pub services: registry::core::service::alloc::ServiceAllocator,
    /// The address other hosts reach this API server at, published in the `kubernetes`
    /// Service's endpoints (kube-apiserver's `--advertise-address`; `None`: the bind address,
    /// or the host's default-route address when bound to all or loopback addresses).
    pub advertise_address: Option<IpAddr>,
    /// `--token`: the cluster's join token. On a datastore that already holds a cluster it
    /// must be that cluster's ([`controlplane::bootstrapdata`]); on an empty one it becomes the
    /// new cluster's token. `None`: `<data_dir>/token`, created on first start.
    pub token: Option<String>,
    /// The cluster DNS this server runs beside it (`skiff server`'s `--cluster-dns` and its DNS
    /// server's port at the advertised address): the API server then keeps the
    /// `kube-system/kube-dns` Service and its endpoints ([`controlplane::kubedns`]). `None`: no
    /// `kube-dns` Service.
    pub cluster_dns: Option<controlplane::kubedns::ClusterDns>,
    /// `--audit-policy-file` and `--audit-log-*`: the audit log ([`audit`]); `None`: no auditing.
    pub audit: Option<audit::AuditOptions>,
    /// Serve `metrics.k8s.io/v1beta1` from kubelets scraped at this interval
    /// ([`metricsserver`]; `skiff server --metric-resolution`). `None`: the group is not served,
    /// as in a cluster without metrics-server.
    pub metric_resolution: Option<std::time::Duration>,
}

impl Config {
    /// Defaults for a data directory: all addresses, port 6443.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            bind_address: IpAddr::from([0, 0, 0, 0]),
            port: 6443,
            kubeconfig_path: None,
            extra_sans: Vec::new(),
            authenticator: None,
            authorizer: None,
            admission: None,
            virtual_resources: Vec::new(),
            rbac: false,
            max_requests_inflight: filters::flowcontrol::DEFAULT_MAX_REQUESTS_INFLIGHT,
            max_mutating_requests_inflight: filters::flowcontrol::DEFAULT_MAX_MUTATING_REQUESTS_INFLIGHT,
            security: filters::authorization::SecurityOptions::default(),
            services: Default::default(),
            advertise_address: None,
            token: None,
            cluster_dns: None,
            audit: None,
            metric_resolution: None,
        }
    }
}

/// A running API server.
pub struct ApiServer {
    state: Arc<AppState>,
    local_addr: SocketAddr,
    pki: pki::Pki,
    kubeconfig_path: PathBuf,
    url: String,
    shutdown_tx: tokio_watch::Sender<bool>,
    server_task: JoinHandle<()>,
    cache_tasks: Vec<JoinHandle<()>>,
    kubernetes_service: JoinHandle<()>,
}

/// The rustls configuration the API server serves HTTPS with, from the certificates in `pki`:
/// the serving certificate; client certificates verified against the cluster CA but optional
/// (bearer tokens authenticate too); ALPN `h2` then `http/1.1`. Also used by `skiff bench
/// empty-handler`, so that its baseline runs the same TLS.
///
/// # Errors
/// When a PEM in `pki` does not parse or the key does not match the certificate.
pub fn tls_config(pki: &pki::Pki) -> Result<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(pki.ca.cert_pem.as_bytes()) {
        roots.add(c.context("parsing ca.crt")?).context("adding the CA to the trust store")?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .context("building the client certificate verifier")?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pki.serving.cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .context("parsing serving.crt")?;
    let key = PrivateKeyDer::from_pem_slice(pki.serving.key_pem.as_bytes()).context("parsing serving.key")?;
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .context("loading the serving certificate")?;
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

async fn fallback(State(state): State<Arc<AppState>>, req: Request<axum::body::Body>) -> axum::response::Response {
    server::handler::handle(state, req).await
}

async fn bootstrap_namespaces(state: &AppState) -> Result<()> {
    let def = state.registry.get("", "v1", "namespaces").context("namespaces are not registered")?.clone();
    for ns in SYSTEM_NAMESPACES {
        let obj = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        match state.objects.create(&def, "", obj, None, &registry::store::WriteOptions::default()).await {
            Ok(_) => tracing::info!(namespace = ns, "created namespace"),
            Err(e) if e.code == 409 => {}
            Err(e) => anyhow::bail!("creating namespace {ns}: {e}"),
        }
    }
    Ok(())
}

impl ApiServer {
    /// Loads or generates the PKI, writes the kubeconfig, starts the watch caches, creates the
    /// system namespaces and starts serving HTTPS. Returns once the listener is bound; use
    /// [`ApiServer::wait_ready`] to wait for the caches.
    pub async fn start(mut config: Config, store: Arc<dyn Backend>) -> Result<ApiServer> {
        let mut registry = Registry::default();
        // The cluster's CA and service-account key come from the datastore when another server
        // made them, before anything here reads or generates them.
        let joined =
            controlplane::bootstrapdata::adopt(&config.data_dir, config.token.as_deref(), store.as_ref()).await?;
        let bootstrap_store = store.clone();
        let security = if config.rbac { Some(filters::authorization::install(&mut config)?) } else { None };
        let mut sans = pki::host_sans();
        if !config.bind_address.is_unspecified() {
            sans.push(config.bind_address.to_string());
        }
        sans.extend(config.extra_sans.iter().cloned());
        // Pods reach the API server at the `kubernetes` Service's ClusterIP.
        sans.push(config.services.ips.first().to_string());
        let mut seen = std::collections::HashSet::new();
        sans.retain(|s| seen.insert(s.clone()));
        let pki = pki::Pki::load_or_generate(&config.data_dir.join("tls"), &sans)?;
        let tls = Arc::new(tls_config(&pki)?);

        let listener = TcpListener::bind((config.bind_address, config.port))
            .await
            .with_context(|| format!("binding {}:{}", config.bind_address, config.port))?;
        let local_addr = listener.local_addr()?;
        let client_host = if config.bind_address.is_unspecified() || config.bind_address.is_loopback() {
            "127.0.0.1".to_string()
        } else {
            match config.bind_address {
                IpAddr::V6(v6) => format!("[{v6}]"),
                IpAddr::V4(v4) => v4.to_string(),
            }
        };
        let url = format!("https://{client_host}:{}", local_addr.port());
        let kubeconfig_path = config.kubeconfig_path.clone().unwrap_or_else(|| config.data_dir.join("kubeconfig.yaml"));
        pki.write_kubeconfig(&kubeconfig_path, &url)?;

        let metrics = Arc::new(Metrics::default());
        let mut virtuals = HashMap::new();
        for v in &config.virtual_resources {
            if v.subresource.is_none() {
                registry.add(v.def.clone());
            }
            let key = (v.def.group.to_string(), v.def.resource.to_string(), v.subresource.unwrap_or("").to_string());
            virtuals.insert(key, v.handler.clone());
        }
        let metrics_server = config.metric_resolution.map(|r| Arc::new(metricsserver::MetricsServer::new(r)));
        if metrics_server.is_some() {
            for def in metricsserver::resource_defs() {
                registry.add(def);
            }
        }
        let mut caches = HashMap::new();
        let mut cache_tasks = Vec::new();
        for def in registry.all() {
            if def.storage.is_empty() || caches.contains_key(def.storage) {
                continue;
            }
            let cache = WatchCache::new(def.prefix(), WATCH_CACHE_EVENTS, WATCHER_BACKLOG);
            cache_tasks.push(tokio::spawn(cache.clone().run(store.clone())));
            caches.insert(def.storage.to_string(), cache);
        }
        let (shutdown_tx, shutdown_rx) = tokio_watch::channel(false);
        let audit = config.audit.as_ref().map(audit::Auditor::new).transpose()?.map(Arc::new);
        let state = Arc::new(AppState {
            registry,
            objects: Objects {
                store: store.clone(),
                metrics: metrics.clone(),
                admission: config.admission.clone().unwrap_or_else(|| Arc::new(admission::seam::AdmitAll)),
                namespaces: Default::default(),
                services: Arc::new(config.services.clone()),
            },
            caches,
            metrics,
            shutdown: shutdown_rx.clone(),
            server_address: format!("{client_host}:{}", local_addr.port()),
            authenticator: config.authenticator.clone().unwrap_or_else(|| Arc::new(CertificateAuthenticator)),
            authorizer: config.authorizer.clone().unwrap_or_else(|| Arc::new(auth::AlwaysAllow)),
            kubelet_tls: Some(endpoints::proxy::kubelet_client_tls(
                &pki.kubelet_client.cert_pem,
                &pki.kubelet_client.key_pem,
            )?),
            virtuals,
            audit,
            metrics_server: metrics_server.clone(),
            aggregator: Arc::new(aggregator::Aggregator::new(pki.front_proxy_client.clone())),
        });
        if let Some(cache) = state.registry.get("", "v1", "namespaces").and_then(|d| state.caches.get(d.storage)) {
            state.objects.namespaces.use_cache(cache.clone());
        }
        bootstrap_namespaces(&state).await?;
        controlplane::bootstrap::priority_classes(&state).await?;
        controlplane::bootstrap::storage_classes(&state).await?;
        cache_tasks.push(tokio::spawn(registry::core::service::repair_loop(state.clone())));
        let me = controlplane::kubernetesservice::Endpoint {
            ip: controlplane::kubernetesservice::advertise_address(config.advertise_address, config.bind_address),
            port: local_addr.port(),
            dns_port: config.cluster_dns.map(|dns| dns.port),
        };
        let mut system_services =
            vec![controlplane::kubernetesservice::kubernetes(&state.objects.services.ips.first().to_string(), me.port)];
        system_services.extend(config.cluster_dns.map(controlplane::kubedns::service));
        let kubernetes_service =
            tokio::spawn(controlplane::kubernetesservice::run(state.clone(), me, system_services, shutdown_rx.clone()));
        cache_tasks.push(tokio::spawn(registry::crd::run(state.clone())));
        if let Some(ms) = metrics_server {
            cache_tasks.push(tokio::spawn(metricsserver::scraper::run(state.clone(), ms)));
        }
        cache_tasks.push(tokio::spawn(aggregator::available::run(state.clone())));
        controlplane::clusterauthenticationtrust::publish(&state, &pki).await?;
        if let Some(security) = security {
            cache_tasks.extend(security.start(&state).await?);
        }

        let router = axum::Router::new()
            .fallback(fallback)
            .with_state(state.clone())
            .merge(controlplane::join::router(&config.data_dir, &pki)?);
        if !joined {
            // The join token exists now (the join router made it): later servers can join.
            controlplane::bootstrapdata::publish(&config.data_dir, bootstrap_store.as_ref()).await?;
        }
        let limits = Arc::new(filters::flowcontrol::MaxInFlight::new(
            config.max_requests_inflight,
            config.max_mutating_requests_inflight,
            state.metrics.clone(),
        ));
        let router = router.layer(axum::middleware::from_fn_with_state(limits, filters::flowcontrol::max_in_flight));
        let router = router.layer(axum::middleware::from_fn(server::unread_body::drain_unread_request_body));
        let server_task = tokio::spawn(serve(listener, tls, router, shutdown_rx));
        tracing::info!(%url, kubeconfig = %kubeconfig_path.display(), "API server listening");
        Ok(ApiServer {
            state,
            local_addr,
            pki,
            kubeconfig_path,
            url,
            shutdown_tx,
            server_task,
            cache_tasks,
            kubernetes_service,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The URL clients on this host use (`https://127.0.0.1:<port>`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Path of the admin kubeconfig.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The cluster PKI.
    pub fn pki(&self) -> &pki::Pki {
        &self.pki
    }

    /// Shared handler state (registry, object store, caches, metrics).
    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// True when every watch cache has loaded and every Local APIService is registered and
    /// Available (kube-apiserver's `autoregister-completion`).
    pub fn is_ready(&self) -> bool {
        self.state.caches.values().all(|c| c.is_ready()) && self.state.aggregator.is_synced()
    }

    /// Waits until [`ApiServer::is_ready`].
    pub async fn wait_ready(&self) {
        while !self.is_ready() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// A `kube::Client` authenticated as `system:admin` over loopback HTTPS, for in-process
    /// components (controllers, scheduler, kubelet).
    pub async fn client(&self) -> Result<kube::Client> {
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&self.pki.kubeconfig(&self.url))?;
        let cfg = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default()).await?;
        Ok(kube::Client::try_from(cfg)?)
    }

    /// Graceful shutdown: stop accepting, end watches, let in-flight requests finish (up to
    /// `grace`), then stop the caches.
    pub async fn shutdown(self, grace: Duration) {
        let _ = self.shutdown_tx.send(true);
        // This server's address leaves the `kubernetes` endpoints while the store is open.
        if tokio::time::timeout(grace, self.kubernetes_service).await.is_err() {
            tracing::warn!("removing this server from the kubernetes endpoints did not finish within {grace:?}");
        }
        if tokio::time::timeout(grace, self.server_task).await.is_err() {
            tracing::warn!("in-flight requests did not finish within {grace:?}");
        }
        for t in self.cache_tasks {
            t.abort();
        }
    }
}

async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: axum::Router,
    mut shutdown: tokio_watch::Receiver<bool>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let (tcp, peer_addr) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let router = router.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer_addr, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let identity = PeerIdentity(
                tls.get_ref().1.peer_certificates().and_then(|certs| certs.first()).and_then(|c| pki::cert_user(c)),
            );
            // HTTP/2: the frames of all streams woken by one event leave in one TLS write.
            let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
            let io = server::batched_writes::BatchedIo::new(tls, h2);
            let svc = router.map_request(move |mut req: Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(identity.clone());
                req.extensions_mut().insert(auth::ClientAddr(peer_addr));
                req
            });
            let svc = hyper_util::service::TowerToHyperService::new(svc);
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(io.clone()), svc);
            if let Err(e) = io.flush_after_poll(watcher.watch(conn.into_owned())).await {
                tracing::debug!(%peer_addr, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
