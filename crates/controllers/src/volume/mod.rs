//! The volume controllers (`pkg/controller/volume`): [`persistentvolume`] binds claims to
//! volumes and reclaims released volumes; [`protection`] removes the `pvc-protection` and
//! `pv-protection` finalizers once a claim or volume is no longer in use.

pub mod persistentvolume;
pub mod protection;
