//! [`TransformingBackend`]: a [`Backend`] whose values under some key prefixes are stored
//! transformed (encrypted), as kube-apiserver's etcd3 store applies its value transformer to
//! every read and write (k8s.io/apiserver `pkg/storage/etcd3/store.go`).

use std::sync::Arc;

use async_trait::async_trait;
use skiff_store::{
    Backend, Error, Event, KeyValue, RangeRequest, RangeResponse, Result, Revision, WatchResponse, WatchStream,
};

use super::transformer::PrefixTransformers;

/// Wraps a backend: writes of keys under a configured prefix store the first provider's form,
/// reads (gets, ranges, deletes' old values, watch events and their previous values) return
/// plain values. Keys under no prefix pass through untouched.
pub struct TransformingBackend {
    inner: Arc<dyn Backend>,
    /// Key prefixes (`/registry/secrets/`) and their providers; the first match wins. Shared
    /// with the relay task of each watch.
    rules: Arc<Vec<(String, PrefixTransformers)>>,
}

impl TransformingBackend {
    /// `rules`: key prefixes and the providers for the keys under them, in configuration order.
    pub fn new(inner: Arc<dyn Backend>, rules: Vec<(String, PrefixTransformers)>) -> Self {
        Self { inner, rules: Arc::new(rules) }
    }

    fn rule(&self, key: &str) -> Option<&PrefixTransformers> {
        self.rules.iter().find(|(p, _)| key.starts_with(p.as_str())).map(|(_, t)| t)
    }

    fn write(&self, key: &str, value: Vec<u8>) -> Result<Vec<u8>> {
        match self.rule(key) {
            Some(t) => {
                t.to_storage(key, &value).map_err(|e| Error::Internal(format!("unable to transform key {key:?}: {e}")))
            }
            None => Ok(value),
        }
    }

    fn read(&self, mut kv: KeyValue) -> Result<KeyValue> {
        // A delete event's key carries no value.
        if kv.value.is_empty() {
            return Ok(kv);
        }
        if let Some(t) = self.rule(&kv.key) {
            kv.value = t
                .from_storage(&kv.key, &kv.value)
                .map_err(|e| Error::Internal(format!("unable to transform key {:?}: {e}", kv.key)))?;
        }
        Ok(kv)
    }

    fn read_event(&self, ev: Event) -> Result<Event> {
        let Event { kind, kv, prev_kv } = ev;
        Ok(Event { kind, kv: self.read(kv)?, prev_kv: prev_kv.map(|p| self.read(p)).transpose()? })
    }
}

#[async_trait]
impl Backend for TransformingBackend {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.inner.get(key).await?.map(|kv| self.read(kv)).transpose()
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let mut resp = self.inner.range(req).await?;
        resp.kvs = resp.kvs.into_iter().map(|kv| self.read(kv)).collect::<Result<_>>()?;
        Ok(resp)
    }

    async fn count(&self, req: RangeRequest) -> Result<i64> {
        self.inner.count(req).await
    }

    async fn create(&self, key: &str, value: Vec<u8>) -> Result<Revision> {
        let value = self.write(key, value)?;
        self.inner.create(key, value).await
    }

    async fn update(&self, key: &str, value: Vec<u8>, expected_mod_revision: Revision) -> Result<Revision> {
        let value = self.write(key, value)?;
        self.inner.update(key, value, expected_mod_revision).await
    }

    async fn delete(&self, key: &str, expected_mod_revision: Option<Revision>) -> Result<(Revision, KeyValue)> {
        let (rev, kv) = self.inner.delete(key, expected_mod_revision).await?;
        Ok((rev, self.read(kv)?))
    }

    async fn watch(&self, prefix: &str, after_revision: Revision) -> Result<WatchStream> {
        let mut inner = self.inner.watch(prefix, after_revision).await?;
        // Watches of prefixes no rule can touch need no relay task.
        if !self.rules.iter().any(|(p, _)| p.starts_with(prefix) || prefix.starts_with(p.as_str())) {
            return Ok(inner);
        }
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let this = TransformingBackend { inner: self.inner.clone(), rules: Arc::clone(&self.rules) };
        tokio::spawn(async move {
            while let Some(msg) = inner.next().await {
                let out = match msg {
                    Ok(WatchResponse::Events(events)) => events
                        .into_iter()
                        .map(|e| this.read_event(e))
                        .collect::<Result<Vec<_>>>()
                        .map(WatchResponse::Events),
                    other => other,
                };
                let failed = out.is_err();
                if tx.send(out).await.is_err() || failed {
                    break;
                }
            }
        });
        Ok(WatchStream::new(rx))
    }

    async fn current_revision(&self) -> Result<Revision> {
        self.inner.current_revision().await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        self.inner.compacted_revision().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::value::transformer::Transformer;

    async fn backend() -> (tempfile::TempDir, Arc<dyn Backend>, TransformingBackend) {
        let dir = tempfile::tempdir().unwrap();
        let inner: Arc<dyn Backend> = Arc::new(
            skiff_store::sqlite::SqliteBackend::open(&dir.path().join("state.db"), Default::default()).unwrap(),
        );
        let t = PrefixTransformers(vec![
            Transformer::AesGcm { name: "k1".into(), key: vec![3; 32] },
            Transformer::Identity,
        ]);
        let wrapped = TransformingBackend::new(inner.clone(), vec![("/registry/secrets/".into(), t)]);
        (dir, inner, wrapped)
    }

    #[tokio::test]
    async fn secrets_are_stored_encrypted_and_read_back_plain_while_other_keys_pass_through() {
        let (_dir, inner, b) = backend().await;
        let rev = b.create("/registry/secrets/default/s", b"{\"data\":\"x\"}".to_vec()).await.unwrap();
        b.create("/registry/configmaps/default/c", b"{\"plain\":1}".to_vec()).await.unwrap();
        let raw = inner.get("/registry/secrets/default/s").await.unwrap().unwrap().value;
        assert!(raw.starts_with(b"k8s:enc:aesgcm:v1:k1:"));
        assert_eq!(inner.get("/registry/configmaps/default/c").await.unwrap().unwrap().value, b"{\"plain\":1}");
        assert_eq!(b.get("/registry/secrets/default/s").await.unwrap().unwrap().value, b"{\"data\":\"x\"}");
        b.update("/registry/secrets/default/s", b"{\"data\":\"y\"}".to_vec(), rev).await.unwrap();
        let listed = b.range(RangeRequest { prefix: "/registry/secrets/".into(), ..Default::default() }).await.unwrap();
        assert_eq!(listed.kvs[0].value, b"{\"data\":\"y\"}");
        let (_, old) = b.delete("/registry/secrets/default/s", None).await.unwrap();
        assert_eq!(old.value, b"{\"data\":\"y\"}");
    }

    #[tokio::test]
    async fn watch_events_and_their_previous_values_arrive_plain() {
        let (_dir, _inner, b) = backend().await;
        let mut w = b.watch("/registry/secrets/", 0).await.unwrap();
        let rev = b.create("/registry/secrets/a/s", b"one".to_vec()).await.unwrap();
        b.update("/registry/secrets/a/s", b"two".to_vec(), rev).await.unwrap();
        let mut seen = Vec::new();
        while seen.len() < 2 {
            if let Some(Ok(WatchResponse::Events(evs))) = w.next().await {
                seen.extend(evs);
            }
        }
        assert_eq!(seen[0].kv.value, b"one");
        assert_eq!(seen[1].kv.value, b"two");
        assert_eq!(seen[1].prev_kv.as_ref().unwrap().value, b"one");
    }

    #[tokio::test]
    async fn a_value_no_configured_provider_can_read_is_an_error_not_garbage() {
        let (_dir, inner, _b) = backend().await;
        inner
            .create("/registry/secrets/a/s", b"k8s:enc:aescbc:v1:gone:xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx".to_vec())
            .await
            .unwrap();
        let only_gcm = TransformingBackend::new(
            inner.clone(),
            vec![(
                "/registry/secrets/".into(),
                PrefixTransformers(vec![Transformer::AesGcm { name: "k1".into(), key: vec![3; 32] }]),
            )],
        );
        let e = only_gcm.get("/registry/secrets/a/s").await.unwrap_err();
        assert!(e.to_string().contains("no matching prefix found"), "{e}");
    }
}
