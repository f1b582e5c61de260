//! Server-side printing: the `meta.k8s.io/v1` Table columns and cells of each kind.
//!
//! What `kubectl get` shows comes from the server when it asks for
//! `application/json;as=Table;g=meta.k8s.io;v=v1`. Columns and cell formatting follow Kubernetes'
//! printers (`pkg/printers/internalversion/printers.go`): column names in title case (kubectl
//! upper-cases them), `priority: 1` for the columns only `-o wide` shows. [`row_cells`] always
//! returns the wide cells, as the API server does.
//!
//! Kinds with their own columns: Pod, Node, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job,
//! Service, Endpoints, Namespace, Event (core/v1 and events.k8s.io/v1), ConfigMap, Secret,
//! ServiceAccount, Lease, Role, ClusterRole, RoleBinding, ClusterRoleBinding, StorageClass,
//! HorizontalPodAutoscaler (autoscaling/v1 rows through conversion to v2). Other built-in kinds
//! (CustomResourceDefinition included) get Kubernetes' default table (`Name`, `Created At`);
//! custom resources get `Name`, `Age` (the default printer columns of a CRD).

use std::collections::BTreeSet;
use std::time::SystemTime;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use crate::patch::BUILTIN_GROUPS;
use crate::selector::LabelSelector;

const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// Whether a StorageClass is marked default (`storageutil.IsDefaultAnnotation`): its
/// `storageclass.kubernetes.io/is-default-class` annotation, or the beta one, is `"true"`.
pub fn is_default_storage_class(obj: &Value) -> bool {
    ["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"]
        .iter()
        .any(|k| obj.pointer("/metadata/annotations").and_then(|a| a.get(*k)).and_then(Value::as_str) == Some("true"))
}

/// Kubernetes' `duration.HumanDuration`: `5s`, `3m20s`, `15m`, `5h`, `2d3h`, `45d`, `2y30d`.
///
/// Durations a little in the future (clock skew up to 2s) print as `0s`; further ones as
/// `<invalid>`.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_string();
    } else if seconds < 0 {
        return "0s".to_string();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 { format!("{minutes}m") } else { format!("{minutes}m{s}s") };
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        if m == 0 { format!("{hours}h") } else { format!("{hours}h{m}m") }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 { format!("{}d", hours / 24) } else { format!("{}d{h}h", hours / 24) }
    } else if hours < 24 * 365 * 2 {
        format!("{}d", hours / 24)
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        if dy == 0 { format!("{}y", hours / 24 / 365) } else { format!("{}y{dy}d", hours / 24 / 365) }
    } else {
        format!("{}y", hours / 24 / 365)
    }
}

fn unix_seconds(t: SystemTime) -> f64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

fn parse_time(v: Option<&Value>) -> Option<Timestamp> {
    v.and_then(Value::as_str).filter(|s| !s.is_empty()).and_then(|s| s.parse::<Timestamp>().ok())
}

/// `translateTimestampSince`: the age of an RFC 3339 timestamp, `<unknown>` when missing.
pub fn age_since(timestamp: Option<&Value>, now: SystemTime) -> String {
    match parse_time(timestamp) {
        None => "<unknown>".to_string(),
        Some(t) => {
            let then = t.as_second() as f64 + f64::from(t.subsec_nanosecond()) / 1e9;
            human_duration((unix_seconds(now) - then).floor() as i64)
        }
    }
}

fn col(name: &str, ty: &str, format: &str, description: &str, priority: i32) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": description, "priority": priority})
}

fn name_col() -> Value {
    col("Name", "string", "name", NAME_DOC, 0)
}

fn age_col() -> Value {
    col("Age", "string", "", AGE_DOC, 0)
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

/// The Table columns for a kind (`metav1.TableColumnDefinition`s as JSON: `name`, `type`,
/// `format`, `description`, `priority`).
pub fn column_definitions(api_version: &str, kind: &str) -> Vec<Value> {
    let group = group_of(api_version);
    match (group, kind) {
        ("", "Pod") => vec![
            name_col(),
            col("Ready", "string", "", "The aggregate readiness state of this pod for accepting traffic.", 0),
            col("Status", "string", "", "The aggregate status of the containers in this pod.", 0),
            col(
                "Restarts",
                "string",
                "",
                "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
                0,
            ),
            age_col(),
            col(
                "IP",
                "string",
                "",
                "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
                1,
            ),
            col("Node", "string", "", "NodeName indicates in which node this pod is scheduled.", 1),
            col(
                "Nominated Node",
                "string",
                "",
                "nominatedNodeName is set only when this pod preempts other pods on the node.",
                1,
            ),
            col(
                "Readiness Gates",
                "string",
                "",
                "If specified, all readiness gates will be evaluated for pod readiness.",
                1,
            ),
        ],
        ("", "Node") => vec![
            name_col(),
            col("Status", "string", "", "The status of the node", 0),
            col("Roles", "string", "", "The roles of the node", 0),
            age_col(),
            col("Version", "string", "", "Kubelet Version reported by the node.", 0),
            col("Internal-IP", "string", "", "List of addresses reachable to the node.", 1),
            col("External-IP", "string", "", "List of addresses reachable to the node.", 1),
            col(
                "OS-Image",
                "string",
                "",
                "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
                1,
            ),
            col(
                "Kernel-Version",
                "string",
                "",
                "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
                1,
            ),
            col(
                "Container-Runtime",
                "string",
                "",
                "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
                1,
            ),
        ],
        ("autoscaling", "HorizontalPodAutoscaler") => vec![
            name_col(),
            col(
                "Reference",
                "string",
                "",
                "scaleTargetRef points to the target resource to scale, and is used to the pods for which metrics should be collected, as well as to actually change the replica count.",
                0,
            ),
            col(
                "Targets",
                "string",
                "",
                "metrics contains the specifications for which to use to calculate the desired replica count (the maximum replica count across all metrics will be used).",
                0,
            ),
            col(
                "MinPods",
                "string",
                "",
                "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down.",
                0,
            ),
            col(
                "MaxPods",
                "integer",
                "",
                "maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up. It cannot be less that minReplicas.",
                0,
            ),
            col(
                "Replicas",
                "integer",
                "",
                "currentReplicas is current number of replicas of pods managed by this autoscaler, as last seen by the autoscaler.",
                0,
            ),
            age_col(),
        ],
        ("apps", "Deployment") => vec![
            name_col(),
            col("Ready", "string", "", "Number of the pod with ready state", 0),
            col(
                "Up-to-date",
                "integer",
                "",
                "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
                0,
            ),
            col(
                "Available",
                "integer",
                "",
                "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
                0,
            ),
            age_col(),
            col("Containers", "string", "", "Names of each container in the template.", 1),
            col("Images", "string", "", "Images referenced by each container in the template.", 1),
            col(
                "Selector",
                "string",
                "",
                "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
                1,
            ),
        ],
        ("apps", "ReplicaSet") | ("", "ReplicationController") => vec![
            name_col(),
            col("Desired", "integer", "", "Replicas is the number of desired replicas.", 0),
            col("Current", "integer", "", "Replicas is the most recently observed number of replicas.", 0),
            col("Ready", "integer", "", "The number of ready replicas for this replica set.", 0),
            age_col(),
            col("Containers", "string", "", "Names of each container in the template.", 1),
            col("Images", "string", "", "Images referenced by each container in the template.", 1),
            col(
                "Selector",
                "string",
                "",
                "Selector is a label query over pods that should match the replica count.",
                1,
            ),
        ],
        ("apps", "StatefulSet") => vec![
            name_col(),
            col("Ready", "string", "", "Number of the pod with ready state", 0),
            age_col(),
            col("Containers", "string", "", "Names of each container in the template.", 1),
            col("Images", "string", "", "Images referenced by each container in the template.", 1),
        ],
        ("apps", "DaemonSet") => vec![
            name_col(),
            col("Desired", "integer", "", "The total number of nodes that should be running the daemon pod.", 0),
            col(
                "Current",
                "integer",
                "",
                "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.",
                0,
            ),
            col(
                "Ready",
                "integer",
                "",
                "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.",
                0,
            ),
            col("Up-to-date", "integer", "", "The total number of nodes that are running updated daemon pod", 0),
            col(
                "Available",
                "integer",
                "",
                "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)",
                0,
            ),
            col(
                "Node Selector",
                "string",
                "",
                "NodeSelector is a selector which must be true for the pod to fit on a node.",
                0,
            ),
            age_col(),
            col("Containers", "string", "", "Names of each container in the template.", 1),
            col("Images", "string", "", "Images referenced by each container in the template.", 1),
            col("Selector", "string", "", "A label query over pods that are managed by the daemon set.", 1),
        ],
        ("batch", "Job") => vec![
            name_col(),
            col("Status", "string", "", "Status of the job.", 0),
            col("Completions", "string", "", "The completion status of the job.", 0),
            col("Duration", "string", "", "Time required to complete the job.", 0),
            age_col(),
            col("Containers", "string", "", "Names of each container in the template.", 1),
            col("Images", "string", "", "Images referenced by each container in the template.", 1),
            col("Selector", "string", "", "A label query over pods that should match the pod count.", 1),
        ],
        ("batch", "CronJob") => vec![
            name_col(),
            col("Schedule", "string", "", "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.", 0),
            col(
                "Timezone",
                "string",
                "",
                "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones.",
                0,
            ),
            col(
                "Suspend",
                "boolean",
                "",
                "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.  Defaults to false.",
                0,
            ),
            col("Active", "integer", "", "A list of pointers to currently running jobs.", 0),
            col(
                "Last Schedule",
                "string",
                "",
                "Information when was the last time the job was successfully scheduled.",
                0,
            ),
            age_col(),
            col("Containers", "string", "", "Names of each container in the template.", 1),
            col("Images", "string", "", "Images referenced by each container in the template.", 1),
            col("Selector", "string", "", "A label query over pods that should match the pod count.", 1),
        ],
        ("apps", "ControllerRevision") => vec![
            name_col(),
            col("Controller", "string", "", "Controller of the object", 0),
            col("Revision", "string", "", "Revision indicates the revision of the state represented by Data.", 0),
            age_col(),
        ],
        ("policy", "PodDisruptionBudget") => vec![
            name_col(),
            col(
                "Min Available",
                "string",
                "",
                "The minimum number of pods that must be available simultaneously.  This can be either an integer or a string specifying a percentage, e.g. \"28%\".",
                0,
            ),
            col(
                "Max Unavailable",
                "string",
                "",
                "The maximum number of pods that may be unavailable simultaneously.  This can be either an integer or a string specifying a percentage, e.g. \"28%\".",
                0,
            ),
            col(
                "Allowed Disruptions",
                "integer",
                "",
                "Calculated number of pods that may be disrupted at this time.",
                0,
            ),
            age_col(),
        ],
        ("storage.k8s.io", "StorageClass") => vec![
            name_col(),
            col("Provisioner", "string", "", "provisioner indicates the type of the provisioner.", 0),
            col(
                "ReclaimPolicy",
                "string",
                "",
                "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class. Defaults to Delete.",
                0,
            ),
            col(
                "VolumeBindingMode",
                "string",
                "",
                "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.  When unset, VolumeBindingImmediate is used. This field is only honored by servers that enable the VolumeScheduling feature.",
                0,
            ),
            col(
                "AllowVolumeExpansion",
                "string",
                "",
                "allowVolumeExpansion shows whether the storage class allow volume expand.",
                0,
            ),
            col("Age", "string", "", AGE_DOC, 0),
        ],
        // kube-aggregator's `pkg/registry/apiservice/etcd` table convertor.
        ("apiregistration.k8s.io", "APIService") => vec![
            name_col(),
            col("Service", "string", "", "The reference to the service that hosts this API endpoint.", 0),
            col("Available", "string", "", "Whether this service is available.", 0),
            age_col(),
        ],
        ("scheduling.k8s.io", "PriorityClass") => vec![
            name_col(),
            col(
                "Value",
                "integer",
                "",
                "The value of this priority class. This is the actual priority that pods receive when they have the name of this class in their pod spec.",
                0,
            ),
            col(
                "Global-Default",
                "boolean",
                "",
                "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class.",
                0,
            ),
            age_col(),
            col(
                "PreemptionPolicy",
                "string",
                "",
                "PreemptionPolicy is the Policy for preempting pods with lower priority.",
                0,
            ),
        ],
        ("", "PersistentVolumeClaim") => vec![
            name_col(),
            col("Status", "string", "", "Phase represents the current phase of PersistentVolumeClaim.", 0),
            col(
                "Volume",
                "string",
                "",
                "VolumeName is the binding reference to the PersistentVolume backing this claim.",
                0,
            ),
            col("Capacity", "string", "", "Capacity represents the actual resources of the underlying volume.", 0),
            col(
                "Access Modes",
                "string",
                "",
                "AccessModes contains the desired access modes the volume should have.",
                0,
            ),
            col(
                "StorageClass",
                "string",
                "",
                "StorageClassName is the name of the StorageClass required by the claim.",
                0,
            ),
            col(
                "VolumeAttributesClass",
                "string",
                "",
                "VolumeAttributesClassName is the name of the VolumeAttributesClass the PersistentVolumeClaim uses.",
                0,
            ),
            age_col(),
            col("VolumeMode", "string", "", "volumeMode defines what type of volume is required by the claim.", 1),
        ],
        ("", "PersistentVolume") => vec![
            name_col(),
            col(
                "Capacity",
                "string",
                "",
                "capacity is the description of the persistent volume's resources and capacity.",
                0,
            ),
            col("Access Modes", "string", "", "accessModes contains all ways the volume can be mounted.", 0),
            col(
                "Reclaim Policy",
                "string",
                "",
                "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim.",
                0,
            ),
            col(
                "Status",
                "string",
                "",
                "phase indicates if a volume is available, bound to a claim, or released by a claim.",
                0,
            ),
            col(
                "Claim",
                "string",
                "",
                "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim.",
                0,
            ),
            col(
                "StorageClass",
                "string",
                "",
                "storageClassName is the name of StorageClass to which this persistent volume belongs.",
                0,
            ),
            col(
                "VolumeAttributesClass",
                "string",
                "",
                "Name of VolumeAttributesClass to which this persistent volume belongs.",
                0,
            ),
            col(
                "Reason",
                "string",
                "",
                "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI.",
                0,
            ),
            age_col(),
            col(
                "VolumeMode",
                "string",
                "",
                "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state.",
                1,
            ),
        ],
        ("", "ResourceQuota") => vec![
            name_col(),
            age_col(),
            col(
                "Request",
                "string",
                "",
                "Request represents a minimum amount of cpu/memory that a container may consume.",
                0,
            ),
            col(
                "Limit",
                "string",
                "",
                "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
                0,
            ),
        ],
        ("", "PodTemplate") => vec![
            name_col(),
            col("Containers", "string", "", "Names of each container in the template.", 0),
            col("Images", "string", "", "Images referenced by each container in the template.", 0),
            col("Pod Labels", "string", "", "The labels for the pod template.", 0),
        ],
        ("discovery.k8s.io", "EndpointSlice") => vec![
            name_col(),
            col(
                "AddressType",
                "string",
                "",
                "addressType specifies the type of address carried by this EndpointSlice.",
                0,
            ),
            col(
                "Ports",
                "string",
                "",
                "ports specifies the list of network ports exposed by each endpoint in this slice.",
                0,
            ),
            col("Endpoints", "string", "", "endpoints is a list of unique endpoints in this slice.", 0),
            age_col(),
        ],
        ("networking.k8s.io", "Ingress") => vec![
            name_col(),
            col("Class", "string", "", "The name of the IngressClass resource.", 0),
            col("Hosts", "string", "", "Hosts that incoming requests are matched against before the ingress rule", 0),
            col("Address", "string", "", "Address is a list containing ingress points for the load-balancer", 0),
            col("Ports", "string", "", "Ports of TLS configurations that open", 0),
            age_col(),
        ],
        ("networking.k8s.io", "NetworkPolicy") => vec![
            name_col(),
            col("Pod-Selector", "string", "", "Selects the pods to which this NetworkPolicy object applies.", 0),
            age_col(),
        ],
        ("", "Service") => vec![
            name_col(),
            col("Type", "string", "", "type determines how the Service is exposed.", 0),
            col(
                "Cluster-IP",
                "string",
                "",
                "clusterIP is the IP address of the service and is usually assigned randomly.",
                0,
            ),
            col(
                "External-IP",
                "string",
                "",
                "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.",
                0,
            ),
            col("Port(s)", "string", "", "The list of ports that are exposed by this service.", 0),
            age_col(),
            col(
                "Selector",
                "string",
                "",
                "Route service traffic to pods with label keys and values matching this selector.",
                1,
            ),
        ],
        ("", "Endpoints") => {
            vec![name_col(), col("Endpoints", "string", "", "Endpoints of the resource", 0), age_col()]
        }
        ("", "Namespace") => vec![name_col(), col("Status", "string", "", "The status of the namespace", 0), age_col()],
        ("", "Event") | ("events.k8s.io", "Event") => vec![
            col(
                "Last Seen",
                "string",
                "",
                "The time at which the most recent occurrence of this event was recorded.",
                0,
            ),
            col(
                "Type",
                "string",
                "",
                "Type of this event (Normal, Warning), new types could be added in the future",
                0,
            ),
            col(
                "Reason",
                "string",
                "",
                "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
                0,
            ),
            col("Object", "string", "", "The object that this event is about.", 0),
            col(
                "Subobject",
                "string",
                "",
                "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement.",
                1,
            ),
            col(
                "Source",
                "string",
                "",
                "The component reporting this event. Should be a short machine understandable string.",
                1,
            ),
            col("Message", "string", "", "A human-readable description of the status of this operation.", 0),
            col(
                "First Seen",
                "string",
                "",
                "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
                1,
            ),
            col("Count", "string", "", "The number of times this event has occurred.", 1),
            col("Name", "string", "name", NAME_DOC, 1),
        ],
        ("", "ConfigMap") => {
            vec![name_col(), col("Data", "integer", "", "Data contains the configuration data.", 0), age_col()]
        }
        ("", "Secret") => vec![
            name_col(),
            col("Type", "string", "", "Used to facilitate programmatic handling of secret data.", 0),
            col("Data", "integer", "", "Data contains the secret data.", 0),
            age_col(),
        ],
        ("", "ServiceAccount") => vec![
            name_col(),
            col(
                "Secrets",
                "integer",
                "",
                "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.",
                0,
            ),
            age_col(),
        ],
        ("coordination.k8s.io", "Lease") => vec![
            name_col(),
            col("Holder", "string", "", "holderIdentity contains the identity of the holder of a current lease.", 0),
            age_col(),
        ],
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => vec![
            name_col(),
            col(
                "Role",
                "string",
                "",
                "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace.",
                0,
            ),
            age_col(),
            col("Users", "string", "", "Users in the roleBinding", 1),
            col("Groups", "string", "", "Groups in the roleBinding", 1),
            col("ServiceAccounts", "string", "", "ServiceAccounts in the roleBinding", 1),
        ],
        (g, _) if BUILTIN_GROUPS.contains(&g) => vec![name_col(), col("Created At", "date", "", AGE_DOC, 0)],
        _ => vec![
            name_col(),
            col(
                "Age",
                "date",
                "",
                "Custom resource definition column (in JSONPath format): .metadata.creationTimestamp",
                0,
            ),
        ],
    }
}

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn i(v: &Value, pointer: &str) -> i64 {
    v.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn list<'a>(v: &'a Value, pointer: &str) -> &'a [Value] {
    v.pointer(pointer).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

/// A quantity as `resource.Quantity.String()` prints it (the text as is when it does not parse).
fn quantity_string(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "0".to_string(),
        Some(q) => crate::quantity::Quantity::from_json(q)
            .map(|q| q.to_string())
            .unwrap_or_else(|| q.as_str().map_or_else(|| q.to_string(), str::to_string)),
    }
}

/// `formatHPAMetrics`: each metric as `current/target` (`cpu: 40%/50%`, `<unknown>` before the
/// controller measured it), the first two shown and the rest counted.
fn hpa_targets(specs: &[Value], statuses: &[Value]) -> String {
    if specs.is_empty() {
        return "<none>".to_string();
    }
    let status = |i: usize, field: &str| statuses.get(i).and_then(|st| st.get(field)).filter(|v| !v.is_null());
    let q = |v: &Value, p: &str| quantity_string(v.pointer(p));
    let mut list: Vec<String> = Vec::new();
    for (idx, spec) in specs.iter().enumerate() {
        let ty = s(spec, "/type");
        let entry = match ty {
            "External" | "Object" => {
                let field = if ty == "External" { "external" } else { "object" };
                let src = &spec[field];
                if src.pointer("/target/averageValue").is_some_and(|v| !v.is_null()) {
                    let current = status(idx, field)
                        .and_then(|st| st.pointer("/current/averageValue"))
                        .filter(|v| !v.is_null())
                        .map_or("<unknown>".to_string(), |v| quantity_string(Some(v)));
                    format!("{current}/{} (avg)", q(src, "/target/averageValue"))
                } else {
                    let current = status(idx, field).map_or("<unknown>".to_string(), |st| q(st, "/current/value"));
                    format!("{current}/{}", q(src, "/target/value"))
                }
            }
            "Pods" => {
                let current = status(idx, "pods").map_or("<unknown>".to_string(), |st| q(st, "/current/averageValue"));
                format!("{current}/{}", q(&spec["pods"], "/target/averageValue"))
            }
            "Resource" | "ContainerResource" => {
                let field = if ty == "Resource" { "resource" } else { "containerResource" };
                let src = &spec[field];
                let name = s(src, "/name");
                if src.pointer("/target/averageValue").is_some_and(|v| !v.is_null()) {
                    let current =
                        status(idx, field).map_or("<unknown>".to_string(), |st| q(st, "/current/averageValue"));
                    format!("{name}: {current}/{}", q(src, "/target/averageValue"))
                } else {
                    let current = status(idx, field)
                        .and_then(|st| st.pointer("/current/averageUtilization"))
                        .and_then(Value::as_i64)
                        .map_or("<unknown>".to_string(), |u| format!("{u}%"));
                    let target = src
                        .pointer("/target/averageUtilization")
                        .and_then(Value::as_i64)
                        .map_or("<auto>".to_string(), |u| format!("{u}%"));
                    format!("{name}: {current}/{target}")
                }
            }
            _ => "<unknown type>".to_string(),
        };
        list.push(entry);
    }
    let count = list.len();
    if count > 2 {
        list.truncate(2);
        return format!("{} + {} more...", list.join(", "), count - 2);
    }
    list.join(", ")
}

fn or_none(s: &str) -> String {
    if s.is_empty() { "<none>".to_string() } else { s.to_string() }
}

/// The Table cells of one object, matching [`column_definitions`] (wide columns included).
/// `now` is the reference time for ages.
pub fn row_cells(api_version: &str, kind: &str, obj: &Value, now: SystemTime) -> Vec<Value> {
    let group = group_of(api_version);
    let name = json!(s(obj, "/metadata/name"));
    let age = || json!(age_since(obj.pointer("/metadata/creationTimestamp"), now));
    match (group, kind) {
        ("", "Pod") => pod_cells(obj, now),
        ("", "Node") => node_cells(obj, now),
        ("autoscaling", "HorizontalPodAutoscaler") => {
            let converted;
            let obj = if api_version == "autoscaling/v1" {
                converted = crate::autoscaling::hpa_v1_to_v2(obj);
                &converted
            } else {
                obj
            };
            let min = match obj.pointer("/spec/minReplicas").and_then(Value::as_i64) {
                Some(m) => m.to_string(),
                None => "<unset>".to_string(),
            };
            vec![
                name,
                json!(format!("{}/{}", s(obj, "/spec/scaleTargetRef/kind"), s(obj, "/spec/scaleTargetRef/name"))),
                json!(hpa_targets(list(obj, "/spec/metrics"), list(obj, "/status/currentMetrics"))),
                json!(min),
                json!(i(obj, "/spec/maxReplicas")),
                json!(i(obj, "/status/currentReplicas")),
                age(),
            ]
        }
        ("apps", "Deployment") => {
            let (containers, images) = containers_and_images(obj, "/spec/template/spec/containers");
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    i(obj, "/status/readyReplicas"),
                    obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)
                )),
                json!(i(obj, "/status/updatedReplicas")),
                json!(i(obj, "/status/availableReplicas")),
                age(),
                json!(containers),
                json!(images),
                json!(selector_string(obj.pointer("/spec/selector"))),
            ]
        }
        ("apps", "ReplicaSet") | ("", "ReplicationController") => {
            let (containers, images) = containers_and_images(obj, "/spec/template/spec/containers");
            let selector = if kind == "ReplicationController" {
                format_labels(obj.pointer("/spec/selector"))
            } else {
                selector_string(obj.pointer("/spec/selector"))
            };
            vec![
                name,
                json!(obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)),
                json!(i(obj, "/status/replicas")),
                json!(i(obj, "/status/readyReplicas")),
                age(),
                json!(containers),
                json!(images),
                json!(selector),
            ]
        }
        ("apps", "StatefulSet") => {
            let (containers, images) = containers_and_images(obj, "/spec/template/spec/containers");
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    i(obj, "/status/readyReplicas"),
                    obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)
                )),
                age(),
                json!(containers),
                json!(images),
            ]
        }
        ("apps", "DaemonSet") => {
            let (containers, images) = containers_and_images(obj, "/spec/template/spec/containers");
            vec![
                name,
                json!(i(obj, "/status/desiredNumberScheduled")),
                json!(i(obj, "/status/currentNumberScheduled")),
                json!(i(obj, "/status/numberReady")),
                json!(i(obj, "/status/updatedNumberScheduled")),
                json!(i(obj, "/status/numberAvailable")),
                json!(format_labels(obj.pointer("/spec/template/spec/nodeSelector"))),
                age(),
                json!(containers),
                json!(images),
                json!(selector_string(obj.pointer("/spec/selector"))),
            ]
        }
        ("batch", "CronJob") => {
            let (containers, images) = containers_and_images(obj, "/spec/jobTemplate/spec/template/spec/containers");
            let last = obj.pointer("/status/lastScheduleTime").filter(|v| v.is_string());
            vec![
                name,
                json!(s(obj, "/spec/schedule")),
                json!(or_none(s(obj, "/spec/timeZone"))),
                json!(obj.pointer("/spec/suspend").and_then(Value::as_bool).unwrap_or(false)),
                json!(list(obj, "/status/active").len()),
                json!(if last.is_some() { age_since(last, now) } else { "<none>".to_string() }),
                age(),
                json!(containers),
                json!(images),
                json!(selector_string(obj.pointer("/spec/jobTemplate/spec/selector"))),
            ]
        }
        ("apps", "ControllerRevision") => {
            let owner = list(obj, "/metadata/ownerReferences")
                .iter()
                .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true));
            let controller = match owner {
                Some(o) => {
                    let group = s(o, "/apiVersion").rsplit_once('/').map(|(g, _)| g).unwrap_or("");
                    let kind = s(o, "/kind").to_ascii_lowercase();
                    let what = if group.is_empty() { kind } else { format!("{kind}.{group}") };
                    format!("{what}/{}", s(o, "/name"))
                }
                None => "<none>".to_string(),
            };
            vec![name, json!(controller), json!(i(obj, "/revision")), age()]
        }
        ("policy", "PodDisruptionBudget") => {
            let show = |p: &str| match obj.pointer(p) {
                Some(Value::Number(n)) => n.to_string(),
                Some(Value::String(s)) => s.clone(),
                _ => "N/A".to_string(),
            };
            vec![
                name,
                json!(show("/spec/minAvailable")),
                json!(show("/spec/maxUnavailable")),
                json!(i(obj, "/status/disruptionsAllowed")),
                age(),
            ]
        }
        ("storage.k8s.io", "StorageClass") => {
            // printStorageClass: the default class is marked in the name; unset policies print
            // their API defaults.
            let mut shown = s(obj, "/metadata/name").to_string();
            if is_default_storage_class(obj) {
                shown.push_str(" (default)");
            }
            let or = |p: &str, d: &'static str| match s(obj, p) {
                "" => d.to_string(),
                v => v.to_string(),
            };
            vec![
                json!(shown),
                json!(s(obj, "/provisioner")),
                json!(or("/reclaimPolicy", "Delete")),
                json!(or("/volumeBindingMode", "Immediate")),
                json!(obj.get("allowVolumeExpansion").and_then(Value::as_bool).unwrap_or(false)),
                age(),
            ]
        }
        ("apiregistration.k8s.io", "APIService") => {
            let service = match obj.pointer("/spec/service").filter(|v| v.is_object()) {
                Some(svc) => format!("{}/{}", s(svc, "/namespace"), s(svc, "/name")),
                None => "Local".to_string(),
            };
            let available = obj
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Available"))
                .map_or_else(
                    || "Unknown".to_string(),
                    |c| match s(c, "/status") {
                        "True" => "True".to_string(),
                        other => format!("{other} ({})", s(c, "/reason")),
                    },
                );
            vec![name, json!(service), json!(available), age()]
        }
        ("scheduling.k8s.io", "PriorityClass") => vec![
            name,
            json!(i(obj, "/value")),
            json!(obj.get("globalDefault").and_then(Value::as_bool).unwrap_or(false)),
            age(),
            json!(or_none(s(obj, "/preemptionPolicy"))),
        ],
        ("", "PersistentVolumeClaim") => {
            let bound = s(obj, "/status/phase") == "Bound";
            let storage = if bound { s(obj, "/status/capacity/storage") } else { "" };
            vec![
                name,
                json!(s(obj, "/status/phase")),
                json!(s(obj, "/spec/volumeName")),
                json!(storage),
                json!(if bound { access_modes(list(obj, "/status/accessModes")) } else { String::new() }),
                json!(s(obj, "/spec/storageClassName")),
                json!(or_unset(s(obj, "/spec/volumeAttributesClassName"))),
                age(),
                json!(or_none(s(obj, "/spec/volumeMode"))),
            ]
        }
        ("", "PersistentVolume") => {
            let claim = match obj.pointer("/spec/claimRef") {
                Some(c) if c.is_object() => format!("{}/{}", s(c, "/namespace"), s(c, "/name")),
                _ => String::new(),
            };
            vec![
                name,
                json!(s(obj, "/spec/capacity/storage")),
                json!(access_modes(list(obj, "/spec/accessModes"))),
                json!(s(obj, "/spec/persistentVolumeReclaimPolicy")),
                json!(s(obj, "/status/phase")),
                json!(claim),
                json!(s(obj, "/spec/storageClassName")),
                json!(or_unset(s(obj, "/spec/volumeAttributesClassName"))),
                json!(s(obj, "/status/reason")),
                age(),
                json!(or_none(s(obj, "/spec/volumeMode"))),
            ]
        }
        ("", "ResourceQuota") => {
            let (mut requests, mut limits) = (Vec::new(), Vec::new());
            if let Some(hard) = obj.pointer("/status/hard").and_then(Value::as_object) {
                let mut keys: Vec<&String> = hard.keys().collect();
                keys.sort();
                for k in keys {
                    let used = obj.pointer("/status/used").and_then(|u| u.get(k.as_str())).and_then(Value::as_str);
                    let entry = format!(
                        "{k}: {}/{}",
                        used.unwrap_or("0"),
                        hard.get(k.as_str()).and_then(Value::as_str).unwrap_or("")
                    );
                    if k.starts_with("limits.") {
                        limits.push(entry);
                    } else {
                        requests.push(entry);
                    }
                }
            }
            vec![name, age(), json!(requests.join(", ")), json!(limits.join(", "))]
        }
        ("", "PodTemplate") => {
            let (containers, images) = containers_and_images(obj, "/template/spec/containers");
            vec![name, json!(containers), json!(images), json!(format_labels(obj.pointer("/template/metadata/labels")))]
        }
        ("discovery.k8s.io", "EndpointSlice") => {
            let ports: Vec<String> = list(obj, "/ports")
                .iter()
                .map(|p| {
                    p.get("port").and_then(Value::as_i64).map(|n| n.to_string()).unwrap_or_else(|| "<unset>".into())
                })
                .collect();
            let addrs: Vec<String> = list(obj, "/endpoints")
                .iter()
                .flat_map(|e| {
                    list(e, "/addresses").iter().filter_map(Value::as_str).map(str::to_string).collect::<Vec<_>>()
                })
                .collect();
            let shown = if addrs.len() > 3 {
                format!("{} + {} more...", addrs[..3].join(","), addrs.len() - 3)
            } else {
                addrs.join(",")
            };
            vec![
                name,
                json!(s(obj, "/addressType")),
                json!(if ports.is_empty() { "<unset>".to_string() } else { ports.join(",") }),
                json!(if shown.is_empty() { "<unset>".to_string() } else { shown }),
                age(),
            ]
        }
        ("networking.k8s.io", "Ingress") => {
            let hosts: Vec<&str> =
                list(obj, "/spec/rules").iter().filter_map(|r| r.get("host").and_then(Value::as_str)).collect();
            let addresses: Vec<&str> = list(obj, "/status/loadBalancer/ingress")
                .iter()
                .filter_map(|a| a.get("ip").or_else(|| a.get("hostname")).and_then(Value::as_str))
                .collect();
            let ports = if list(obj, "/spec/tls").is_empty() { "80" } else { "80, 443" };
            vec![
                name,
                json!(or_none(s(obj, "/spec/ingressClassName"))),
                json!(if hosts.is_empty() { "*".to_string() } else { hosts.join(",") }),
                json!(addresses.join(",")),
                json!(ports),
                age(),
            ]
        }
        ("networking.k8s.io", "NetworkPolicy") => {
            let sel = selector_string(obj.pointer("/spec/podSelector"));
            vec![name, json!(if sel.is_empty() || sel == "<none>" { "<none>".to_string() } else { sel }), age()]
        }
        ("batch", "Job") => job_cells(obj, now),
        ("", "Service") => service_cells(obj, now),
        ("", "Endpoints") => vec![name, json!(format_endpoints(obj)), age()],
        ("", "Namespace") => vec![name, json!(s(obj, "/status/phase")), age()],
        ("", "Event") | ("events.k8s.io", "Event") => event_cells(group, obj, now),
        ("", "ConfigMap") => {
            let n = obj.get("data").and_then(Value::as_object).map_or(0, |m| m.len())
                + obj.get("binaryData").and_then(Value::as_object).map_or(0, |m| m.len());
            vec![name, json!(n), age()]
        }
        ("", "Secret") => {
            let n = obj.get("data").and_then(Value::as_object).map_or(0, |m| m.len());
            vec![name, json!(s(obj, "/type")), json!(n), age()]
        }
        ("", "ServiceAccount") => vec![name, json!(list(obj, "/secrets").len()), age()],
        ("coordination.k8s.io", "Lease") => vec![name, json!(s(obj, "/spec/holderIdentity")), age()],
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
            for subject in list(obj, "/subjects") {
                let n = s(subject, "/name").to_string();
                match s(subject, "/kind") {
                    "User" => users.push(n),
                    "Group" => groups.push(n),
                    "ServiceAccount" => sas.push(format!("{}/{n}", s(subject, "/namespace"))),
                    _ => {}
                }
            }
            vec![
                name,
                json!(format!("{}/{}", s(obj, "/roleRef/kind"), s(obj, "/roleRef/name"))),
                age(),
                json!(users.join(", ")),
                json!(groups.join(", ")),
                json!(sas.join(", ")),
            ]
        }
        (g, _) if BUILTIN_GROUPS.contains(&g) => {
            let created = parse_time(obj.pointer("/metadata/creationTimestamp"))
                .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
                .unwrap_or_default();
            vec![name, json!(created)]
        }
        _ => vec![name, age()],
    }
}

/// `TableRowCondition`s of a row: Kubernetes marks Succeeded and Failed pods `Completed`.
pub fn row_conditions(api_version: &str, kind: &str, obj: &Value) -> Vec<Value> {
    if !group_of(api_version).is_empty() || kind != "Pod" {
        return Vec::new();
    }
    match s(obj, "/status/phase") {
        "Succeeded" => vec![
            json!({"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}),
        ],
        "Failed" => {
            vec![json!({"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."})]
        }
        _ => Vec::new(),
    }
}

fn access_modes(modes: &[Value]) -> String {
    let short: Vec<&str> = modes
        .iter()
        .filter_map(Value::as_str)
        .map(|m| match m {
            "ReadWriteOnce" => "RWO",
            "ReadOnlyMany" => "ROX",
            "ReadWriteMany" => "RWX",
            "ReadWriteOncePod" => "RWOP",
            other => other,
        })
        .collect();
    short.join(",")
}

fn or_unset(v: &str) -> String {
    if v.is_empty() { "<unset>".to_string() } else { v.to_string() }
}

fn containers_and_images(obj: &Value, pointer: &str) -> (String, String) {
    let cs = list(obj, pointer);
    let names: Vec<&str> = cs.iter().map(|c| s(c, "/name")).collect();
    let images: Vec<&str> = cs.iter().map(|c| s(c, "/image")).collect();
    (names.join(","), images.join(","))
}

/// `metav1.LabelSelectorAsSelector(...).String()`, `<none>`-free: "" for an empty selector,
/// `<invalid>` for a bad one.
fn selector_string(sel: Option<&Value>) -> String {
    match sel {
        None | Some(Value::Null) => String::new(),
        Some(v) => LabelSelector::from_json(v).map(|s| s.to_string()).unwrap_or_else(|_| "<invalid>".to_string()),
    }
}

/// `labels.FormatLabels`: `k=v,k2=v2` sorted by key, `<none>` when empty.
fn format_labels(m: Option<&Value>) -> String {
    let Some(m) = m.and_then(Value::as_object).filter(|m| !m.is_empty()) else { return "<none>".to_string() };
    let mut pairs: Vec<String> = m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())).collect();
    pairs.sort();
    pairs.join(",")
}

// ---------------------------------------------------------------------------------------------
// Pods.

fn condition_true(obj: &Value, ty: &str) -> bool {
    list(obj, "/status/conditions").iter().any(|c| s(c, "/type") == ty && s(c, "/status") == "True")
}

fn finished_at(status: &Value) -> Option<Timestamp> {
    parse_time(status.pointer("/lastState/terminated/finishedAt"))
}

fn pod_cells(pod: &Value, now: SystemTime) -> Vec<Value> {
    let containers = list(pod, "/spec/containers");
    let init_containers = list(pod, "/spec/initContainers");
    let restartable: BTreeSet<&str> =
        init_containers.iter().filter(|c| s(c, "/restartPolicy") == "Always").map(|c| s(c, "/name")).collect();
    let mut total = containers.len() + restartable.len();
    let _ = &mut total;
    let mut ready = 0;
    let mut restarts: i64 = 0;
    let mut restartable_restarts: i64 = 0;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_restartable_restart: Option<Timestamp> = None;
    let phase = s(pod, "/status/phase");
    let mut reason =
        if s(pod, "/status/reason").is_empty() { phase.to_string() } else { s(pod, "/status/reason").to_string() };
    for c in list(pod, "/status/conditions") {
        if s(c, "/type") == "PodScheduled" && s(c, "/reason") == "SchedulingGated" {
            reason = "SchedulingGated".to_string();
        }
    }

    let mut initializing = false;
    let init_statuses = list(pod, "/status/initContainerStatuses");
    for (idx, cs) in init_statuses.iter().enumerate() {
        restarts += i(cs, "/restartCount");
        if let Some(t) = finished_at(cs) {
            last_restart = last_restart.max(Some(t));
        }
        let is_restartable = restartable.contains(s(cs, "/name"));
        if is_restartable {
            restartable_restarts += i(cs, "/restartCount");
            if let Some(t) = finished_at(cs) {
                last_restartable_restart = last_restartable_restart.max(Some(t));
            }
        }
        let terminated = cs.pointer("/state/terminated").filter(|v| !v.is_null());
        let waiting_reason = s(cs, "/state/waiting/reason");
        if terminated.is_some_and(|t| i(t, "/exitCode") == 0) {
            continue;
        }
        if is_restartable && cs.get("started") == Some(&Value::Bool(true)) {
            if cs.get("ready") == Some(&Value::Bool(true)) {
                ready += 1;
            }
            continue;
        }
        if let Some(t) = terminated {
            reason = if s(t, "/reason").is_empty() {
                if i(t, "/signal") != 0 {
                    format!("Init:Signal:{}", i(t, "/signal"))
                } else {
                    format!("Init:ExitCode:{}", i(t, "/exitCode"))
                }
            } else {
                format!("Init:{}", s(t, "/reason"))
            };
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            reason = format!("Init:{waiting_reason}");
        } else {
            reason = format!("Init:{idx}/{}", init_containers.len());
        }
        initializing = true;
        break;
    }

    if !initializing || condition_true(pod, "Initialized") {
        restarts = restartable_restarts;
        last_restart = last_restartable_restart;
        let mut has_running = false;
        for cs in list(pod, "/status/containerStatuses").iter().rev() {
            restarts += i(cs, "/restartCount");
            if let Some(t) = finished_at(cs) {
                last_restart = last_restart.max(Some(t));
            }
            let waiting = s(cs, "/state/waiting/reason");
            let terminated = cs.pointer("/state/terminated").filter(|v| !v.is_null());
            if !waiting.is_empty() {
                reason = waiting.to_string();
            } else if let Some(t) = terminated {
                reason = if !s(t, "/reason").is_empty() {
                    s(t, "/reason").to_string()
                } else if i(t, "/signal") != 0 {
                    format!("Signal:{}", i(t, "/signal"))
                } else {
                    format!("ExitCode:{}", i(t, "/exitCode"))
                };
            } else if cs.get("ready") == Some(&Value::Bool(true))
                && cs.pointer("/state/running").is_some_and(|v| !v.is_null())
            {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if condition_true(pod, "Ready") { "Running".to_string() } else { "NotReady".to_string() };
        }
    }

    let deleting = pod.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null());
    if deleting && s(pod, "/status/reason") == "NodeLost" {
        reason = "Unknown".to_string();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".to_string();
    }

    let restarts_str = match last_restart {
        Some(t) if restarts != 0 => {
            let ago = age_since(Some(&Value::String(t.to_string())), now);
            format!("{restarts} ({ago} ago)")
        }
        _ => restarts.to_string(),
    };

    let pod_ip = match s(pod, "/status/podIPs/0/ip") {
        "" => s(pod, "/status/podIP"),
        ip => ip,
    };
    let gates = list(pod, "/spec/readinessGates");
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let true_count = gates.iter().filter(|g| condition_true(pod, s(g, "/conditionType"))).count();
        format!("{true_count}/{}", gates.len())
    };
    vec![
        json!(s(pod, "/metadata/name")),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_str),
        json!(age_since(pod.pointer("/metadata/creationTimestamp"), now)),
        json!(or_none(pod_ip)),
        json!(or_none(s(pod, "/spec/nodeName"))),
        json!(or_none(s(pod, "/status/nominatedNodeName"))),
        json!(readiness_gates),
    ]
}

// ---------------------------------------------------------------------------------------------
// Nodes.

fn node_cells(node: &Value, now: SystemTime) -> Vec<Value> {
    let mut status: Vec<String> = Vec::new();
    if let Some(c) = list(node, "/status/conditions").iter().find(|c| s(c, "/type") == "Ready") {
        status.push(if s(c, "/status") == "True" { "Ready".to_string() } else { "NotReady".to_string() });
    }
    if status.is_empty() {
        status.push("Unknown".to_string());
    }
    if node.pointer("/spec/unschedulable") == Some(&Value::Bool(true)) {
        status.push("SchedulingDisabled".to_string());
    }
    let mut roles = BTreeSet::new();
    if let Some(labels) = node.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, v) in labels {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                if !role.is_empty() {
                    roles.insert(role.to_string());
                }
            } else if k == "kubernetes.io/role" && v.as_str().is_some_and(|v| !v.is_empty()) {
                roles.insert(v.as_str().unwrap_or_default().to_string());
            }
        }
    }
    let roles = if roles.is_empty() { "<none>".to_string() } else { roles.into_iter().collect::<Vec<_>>().join(",") };
    let address = |ty: &str| {
        list(node, "/status/addresses")
            .iter()
            .find(|a| s(a, "/type") == ty)
            .map(|a| s(a, "/address").to_string())
            .unwrap_or_else(|| "<none>".to_string())
    };
    let unknown = |v: &str| if v.is_empty() { "<unknown>".to_string() } else { v.to_string() };
    vec![
        json!(s(node, "/metadata/name")),
        json!(status.join(",")),
        json!(roles),
        json!(age_since(node.pointer("/metadata/creationTimestamp"), now)),
        json!(s(node, "/status/nodeInfo/kubeletVersion")),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(unknown(s(node, "/status/nodeInfo/osImage"))),
        json!(unknown(s(node, "/status/nodeInfo/kernelVersion"))),
        json!(unknown(s(node, "/status/nodeInfo/containerRuntimeVersion"))),
    ]
}

// ---------------------------------------------------------------------------------------------
// Jobs.

fn job_cells(job: &Value, now: SystemTime) -> Vec<Value> {
    let completions = job.pointer("/spec/completions").and_then(Value::as_i64);
    let succeeded = i(job, "/status/succeeded");
    let completions_str = match completions {
        Some(c) => format!("{succeeded}/{c}"),
        None => {
            let parallelism = job.pointer("/spec/parallelism").and_then(Value::as_i64).unwrap_or(0);
            if parallelism > 1 { format!("{succeeded}/1 of {parallelism}") } else { format!("{succeeded}/1") }
        }
    };
    let has =
        |ty: &str| list(job, "/status/conditions").iter().any(|c| s(c, "/type") == ty && s(c, "/status") == "True");
    let status = if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if job.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null()) {
        "Terminating"
    } else if has("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else if has("Suspended") {
        "Suspended"
    } else {
        "Running"
    };
    let start = parse_time(job.pointer("/status/startTime"));
    let end = parse_time(job.pointer("/status/completionTime"));
    let duration = match (start, end) {
        (None, _) => String::new(),
        (Some(st), None) => age_since(Some(&Value::String(st.to_string())), now),
        (Some(st), Some(en)) => human_duration(en.as_second() - st.as_second()),
    };
    let (containers, images) = containers_and_images(job, "/spec/template/spec/containers");
    vec![
        json!(s(job, "/metadata/name")),
        json!(status),
        json!(completions_str),
        json!(duration),
        json!(age_since(job.pointer("/metadata/creationTimestamp"), now)),
        json!(containers),
        json!(images),
        json!(selector_string(job.pointer("/spec/selector"))),
    ]
}

// ---------------------------------------------------------------------------------------------
// Services and endpoints.

fn service_cells(svc: &Value, now: SystemTime) -> Vec<Value> {
    let ty = s(svc, "/spec/type");
    let cluster_ip = match s(svc, "/spec/clusterIPs/0") {
        "" => or_none(s(svc, "/spec/clusterIP")),
        ip => ip.to_string(),
    };
    let external_ips: Vec<String> =
        list(svc, "/spec/externalIPs").iter().filter_map(Value::as_str).map(str::to_string).collect();
    let external = match ty {
        "ClusterIP" | "NodePort" | "" => {
            if external_ips.is_empty() {
                "<none>".to_string()
            } else {
                external_ips.join(",")
            }
        }
        "LoadBalancer" => {
            let mut all: Vec<String> = list(svc, "/status/loadBalancer/ingress")
                .iter()
                .filter_map(|i| {
                    let ip = s(i, "/ip");
                    let host = s(i, "/hostname");
                    if !ip.is_empty() {
                        Some(ip.to_string())
                    } else if !host.is_empty() {
                        Some(host.to_string())
                    } else {
                        None
                    }
                })
                .collect();
            all.extend(external_ips);
            if all.is_empty() { "<pending>".to_string() } else { all.join(",") }
        }
        "ExternalName" => s(svc, "/spec/externalName").to_string(),
        _ => "<unknown>".to_string(),
    };
    let ports: Vec<String> = list(svc, "/spec/ports")
        .iter()
        .map(|p| {
            let proto = s(p, "/protocol");
            let node_port = i(p, "/nodePort");
            if node_port > 0 {
                format!("{}:{node_port}/{proto}", i(p, "/port"))
            } else {
                format!("{}/{proto}", i(p, "/port"))
            }
        })
        .collect();
    vec![
        json!(s(svc, "/metadata/name")),
        json!(ty),
        json!(cluster_ip),
        json!(external),
        json!(if ports.is_empty() { "<none>".to_string() } else { ports.join(",") }),
        json!(age_since(svc.pointer("/metadata/creationTimestamp"), now)),
        json!(format_labels(svc.pointer("/spec/selector"))),
    ]
}

fn join_host_port(ip: &str, port: i64) -> String {
    if ip.contains(':') { format!("[{ip}]:{port}") } else { format!("{ip}:{port}") }
}

/// `formatEndpoints`: up to three `ip:port`s, then ` + N more...`.
fn format_endpoints(ep: &Value) -> String {
    let subsets = list(ep, "/subsets");
    if subsets.is_empty() {
        return "<none>".to_string();
    }
    const MAX: usize = 3;
    let mut out: Vec<String> = Vec::new();
    let mut more = false;
    let mut count = 0;
    for ss in subsets {
        let addresses = list(ss, "/addresses");
        let ports = list(ss, "/ports");
        if ports.is_empty() {
            count += addresses.len();
            for a in addresses {
                if out.len() == MAX {
                    more = true;
                    break;
                }
                out.push(s(a, "/ip").to_string());
            }
            continue;
        }
        for p in ports {
            count += addresses.len();
            for a in addresses {
                if out.len() == MAX {
                    more = true;
                    break;
                }
                out.push(join_host_port(s(a, "/ip"), i(p, "/port")));
            }
        }
    }
    let joined = out.join(",");
    if more { format!("{joined} + {} more...", count - MAX) } else { joined }
}

// ---------------------------------------------------------------------------------------------
// Events.

fn event_cells(group: &str, ev: &Value, now: SystemTime) -> Vec<Value> {
    // events.k8s.io/v1 names: regarding, note, deprecated*; core/v1 names otherwise.
    let new_api = group == "events.k8s.io";
    let pick = |core: &str, new: &str| if new_api { ev.pointer(new) } else { ev.pointer(core) };
    let first_ts = pick("/firstTimestamp", "/deprecatedFirstTimestamp");
    let first = if parse_time(first_ts).is_some() {
        age_since(first_ts, now)
    } else {
        age_since(ev.pointer("/eventTime"), now)
    };
    let last_ts = pick("/lastTimestamp", "/deprecatedLastTimestamp");
    let mut last = if parse_time(last_ts).is_some() { age_since(last_ts, now) } else { first.clone() };
    let mut count = pick("/count", "/deprecatedCount").and_then(Value::as_i64).unwrap_or(0);
    if let Some(series) = ev.get("series").filter(|v| !v.is_null()) {
        last = age_since(series.get("lastObservedTime"), now);
        count = series.get("count").and_then(Value::as_i64).unwrap_or(0);
    } else if count == 0 {
        count = 1;
    }
    let target_ptr = if new_api { "/regarding" } else { "/involvedObject" };
    let kind = s(ev, &format!("{target_ptr}/kind")).to_lowercase();
    let tname = s(ev, &format!("{target_ptr}/name"));
    let target = if tname.is_empty() { kind } else { format!("{kind}/{tname}") };
    let source_ptr = if new_api { "/deprecatedSource" } else { "/source" };
    let component = match s(ev, &format!("{source_ptr}/component")) {
        "" => s(ev, "/reportingController"),
        c => c,
    };
    let instance = match s(ev, &format!("{source_ptr}/host")) {
        "" => s(ev, "/reportingInstance"),
        h => h,
    };
    let source = if component.is_empty() {
        "<unknown>".to_string()
    } else if instance.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {instance}")
    };
    let message = s(ev, if new_api { "/note" } else { "/message" }).trim().to_string();
    vec![
        json!(last),
        json!(s(ev, "/type")),
        json!(s(ev, "/reason")),
        json!(target),
        json!(s(ev, &format!("{target_ptr}/fieldPath"))),
        json!(source),
        json!(message),
        json!(first),
        json!(count),
        json!(s(ev, "/metadata/name")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const NOW: &str = "2024-05-01T12:00:00Z";

    fn now() -> SystemTime {
        let t: Timestamp = NOW.parse().unwrap();
        SystemTime::UNIX_EPOCH + Duration::from_secs(t.as_second() as u64)
    }

    /// An RFC 3339 timestamp `secs` seconds before [`NOW`].
    fn ago(secs: i64) -> String {
        let t: Timestamp = NOW.parse().unwrap();
        Timestamp::from_second(t.as_second() - secs).unwrap().to_string()
    }

    fn check(api_version: &str, kind: &str, obj: Value, want: Value) {
        let cells = row_cells(api_version, kind, &obj, now());
        assert_eq!(Value::Array(cells.clone()), want, "{kind}");
        assert_eq!(cells.len(), column_definitions(api_version, kind).len(), "cells and columns of {kind}");
    }

    #[test]
    fn human_duration_matches_kubernetes() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (200, "3m20s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600, "3h"),
            (5 * 3600 + 30 * 60, "5h30m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (2 * 86400 + 3 * 3600, "2d3h"),
            (3 * 86400, "3d"),
            (45 * 86400, "45d"),
            (2 * 365 * 86400 + 30 * 86400, "2y30d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(secs), want, "{secs}s");
        }
    }

    #[test]
    fn every_kind_has_as_many_cells_as_columns() {
        let kinds = [
            ("v1", "Pod"),
            ("v1", "Node"),
            ("apps/v1", "Deployment"),
            ("apps/v1", "ReplicaSet"),
            ("apps/v1", "StatefulSet"),
            ("apps/v1", "DaemonSet"),
            ("batch/v1", "Job"),
            ("batch/v1", "CronJob"),
            ("apps/v1", "ControllerRevision"),
            ("policy/v1", "PodDisruptionBudget"),
            ("scheduling.k8s.io/v1", "PriorityClass"),
            ("storage.k8s.io/v1", "StorageClass"),
            ("v1", "PersistentVolumeClaim"),
            ("v1", "PersistentVolume"),
            ("v1", "ResourceQuota"),
            ("v1", "PodTemplate"),
            ("discovery.k8s.io/v1", "EndpointSlice"),
            ("networking.k8s.io/v1", "Ingress"),
            ("networking.k8s.io/v1", "NetworkPolicy"),
            ("v1", "Service"),
            ("v1", "Endpoints"),
            ("v1", "Namespace"),
            ("v1", "Event"),
            ("events.k8s.io/v1", "Event"),
            ("v1", "ConfigMap"),
            ("v1", "Secret"),
            ("v1", "ServiceAccount"),
            ("coordination.k8s.io/v1", "Lease"),
            ("rbac.authorization.k8s.io/v1", "Role"),
            ("rbac.authorization.k8s.io/v1", "RoleBinding"),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            ("example.com/v1", "Widget"),
        ];
        for (av, k) in kinds {
            let cols = column_definitions(av, k);
            assert_eq!(row_cells(av, k, &json!({}), now()).len(), cols.len(), "{k}");
            assert_eq!(cols[if k == "Event" { 9 } else { 0 }]["format"], "name", "{k}");
        }
    }

    #[test]
    fn storage_classes_mark_the_default_and_print_unset_policies_as_their_defaults() {
        let sc = json!({
            "metadata": {"name": "local-path", "creationTimestamp": ago(60),
                         "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "skiff.io/local-path", "volumeBindingMode": "WaitForFirstConsumer",
        });
        assert_eq!(
            row_cells("storage.k8s.io/v1", "StorageClass", &sc, now()),
            [
                json!("local-path (default)"),
                json!("skiff.io/local-path"),
                json!("Delete"),
                json!("WaitForFirstConsumer"),
                json!(false),
                json!("60s")
            ]
        );
        let beta = json!({"metadata": {"name": "old", "annotations": {"storageclass.beta.kubernetes.io/is-default-class": "false"}}});
        assert_eq!(row_cells("storage.k8s.io/v1", "StorageClass", &beta, now())[0], "old");
    }

    #[test]
    fn running_pods_show_ready_count_status_and_restarts() {
        let pod = json!({
            "metadata": {"name": "web", "creationTimestamp": ago(300)},
            "spec": {"nodeName": "n1", "containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}],
                "conditions": [{"type": "Ready", "status": "False"}],
                "containerStatuses": [
                    {"name": "a", "ready": true, "restartCount": 0, "state": {"running": {}}},
                    {"name": "b", "ready": false, "restartCount": 5, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                     "lastState": {"terminated": {"finishedAt": ago(120), "exitCode": 1}}}
                ]}
        });
        check(
            "v1",
            "Pod",
            pod,
            json!(["web", "1/2", "CrashLoopBackOff", "5 (2m ago)", "5m", "10.0.0.5", "n1", "<none>", "<none>"]),
        );
    }

    #[test]
    fn pod_status_column_follows_kubectl_rules() {
        let base = |status: Value| json!({"metadata": {"name": "p", "creationTimestamp": ago(10)}, "spec": {"containers": [{"name": "a"}]}, "status": status});
        let status_of = |pod: Value| row_cells("v1", "Pod", &pod, now())[2].clone();
        assert_eq!(status_of(base(json!({"phase": "Pending"}))), "Pending");
        assert_eq!(
            status_of(base(
                json!({"phase": "Pending", "containerStatuses": [{"name": "a", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]})
            )),
            "ImagePullBackOff"
        );
        assert_eq!(
            status_of(base(
                json!({"phase": "Succeeded", "containerStatuses": [{"name": "a", "state": {"terminated": {"reason": "Completed", "exitCode": 0}}}]})
            )),
            "Completed"
        );
        assert_eq!(
            status_of(base(
                json!({"phase": "Running", "containerStatuses": [{"name": "a", "state": {"terminated": {"exitCode": 137, "signal": 9}}}]})
            )),
            "Signal:9"
        );
        let mut deleting = base(json!({"phase": "Running"}));
        deleting["metadata"]["deletionTimestamp"] = json!(ago(1));
        assert_eq!(status_of(deleting), "Terminating");
        let mut init = base(
            json!({"phase": "Pending", "initContainerStatuses": [{"name": "i", "state": {"waiting": {"reason": "PodInitializing"}}}]}),
        );
        init["spec"]["initContainers"] = json!([{"name": "i"}]);
        assert_eq!(status_of(init), "Init:0/1");
        let gated = base(
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}),
        );
        assert_eq!(status_of(gated), "SchedulingGated");
        assert_eq!(row_conditions("v1", "Pod", &base(json!({"phase": "Succeeded"})))[0]["reason"], "Succeeded");
    }

    #[test]
    fn nodes_show_status_roles_and_addresses() {
        let node = json!({
            "metadata": {"name": "n1", "creationTimestamp": ago(2 * 86400), "labels": {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "master"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Debian", "kernelVersion": "6.1", "containerRuntimeVersion": "containerd://1.7"}}
        });
        check(
            "v1",
            "Node",
            node,
            json!([
                "n1",
                "Ready,SchedulingDisabled",
                "control-plane,master",
                "2d",
                "v1.33.0",
                "10.0.0.1",
                "<none>",
                "Debian",
                "6.1",
                "containerd://1.7"
            ]),
        );
    }

    #[test]
    fn deployments_and_replica_sets_show_replica_counts() {
        let d = json!({
            "metadata": {"name": "web", "creationTimestamp": ago(30)},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.25"}, {"name": "side", "image": "busybox"}]}}},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2, "replicas": 3}
        });
        check(
            "apps/v1",
            "Deployment",
            d.clone(),
            json!(["web", "2/3", 3, 2, "30s", "nginx,side", "nginx:1.25,busybox", "app=web"]),
        );
        check(
            "apps/v1",
            "ReplicaSet",
            d,
            json!(["web", 3, 3, 2, "30s", "nginx,side", "nginx:1.25,busybox", "app=web"]),
        );
    }

    #[test]
    fn services_show_ips_and_ports() {
        let svc = |ty: &str, extra: Value| {
            let mut s = json!({"metadata": {"name": "web", "creationTimestamp": ago(3600)},
                "spec": {"type": ty, "clusterIP": "10.43.0.10", "clusterIPs": ["10.43.0.10"], "selector": {"app": "web"},
                    "ports": [{"port": 80, "protocol": "TCP"}, {"port": 443, "nodePort": 30443, "protocol": "TCP"}]}});
            if let (Some(spec), Value::Object(e)) = (s["spec"].as_object_mut(), extra) {
                spec.extend(e);
            }
            s
        };
        check(
            "v1",
            "Service",
            svc("ClusterIP", json!({})),
            json!(["web", "ClusterIP", "10.43.0.10", "<none>", "80/TCP,443:30443/TCP", "60m", "app=web"]),
        );
        assert_eq!(row_cells("v1", "Service", &svc("LoadBalancer", json!({})), now())[3], "<pending>");
        assert_eq!(
            row_cells("v1", "Service", &svc("ExternalName", json!({"externalName": "example.com"})), now())[3],
            "example.com"
        );
    }

    #[test]
    fn events_show_last_seen_object_and_source() {
        let ev = json!({
            "metadata": {"name": "web.1"},
            "involvedObject": {"kind": "Pod", "name": "web", "fieldPath": "spec.containers{nginx}"},
            "reason": "Pulled", "type": "Normal", "message": " Pulled image \n",
            "source": {"component": "kubelet", "host": "n1"},
            "firstTimestamp": ago(600), "lastTimestamp": ago(60), "count": 3
        });
        check(
            "v1",
            "Event",
            ev,
            json!([
                "60s",
                "Normal",
                "Pulled",
                "pod/web",
                "spec.containers{nginx}",
                "kubelet, n1",
                "Pulled image",
                "10m",
                3,
                "web.1"
            ]),
        );
        let new = json!({
            "metadata": {"name": "e"}, "regarding": {"kind": "Deployment", "name": "web"},
            "reason": "ScalingReplicaSet", "type": "Normal", "note": "Scaled up",
            "eventTime": "2024-05-01T11:59:50.000000Z", "reportingController": "deployment-controller"
        });
        check(
            "events.k8s.io/v1",
            "Event",
            new,
            json!([
                "10s",
                "Normal",
                "ScalingReplicaSet",
                "deployment/web",
                "",
                "deployment-controller",
                "Scaled up",
                "10s",
                1,
                "e"
            ]),
        );
    }

    #[test]
    fn simple_kinds_count_their_data() {
        check(
            "v1",
            "ConfigMap",
            json!({"metadata": {"name": "c", "creationTimestamp": ago(5)}, "data": {"a": "1", "b": "2"}}),
            json!(["c", 2, "5s"]),
        );
        check(
            "v1",
            "Secret",
            json!({"metadata": {"name": "s", "creationTimestamp": ago(5)}, "type": "Opaque", "data": {"a": "MQ=="}}),
            json!(["s", "Opaque", 1, "5s"]),
        );
        check(
            "v1",
            "Namespace",
            json!({"metadata": {"name": "default", "creationTimestamp": ago(5)}, "status": {"phase": "Active"}}),
            json!(["default", "Active", "5s"]),
        );
        check(
            "coordination.k8s.io/v1",
            "Lease",
            json!({"metadata": {"name": "n1", "creationTimestamp": ago(5)}, "spec": {"holderIdentity": "n1"}}),
            json!(["n1", "n1", "5s"]),
        );
        check(
            "v1",
            "ServiceAccount",
            json!({"metadata": {"name": "default", "creationTimestamp": ago(5)}}),
            json!(["default", 0, "5s"]),
        );
        check(
            "v1",
            "Endpoints",
            json!({"metadata": {"name": "web", "creationTimestamp": ago(5)}, "subsets": [{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}, {"ip": "10.0.0.3"}, {"ip": "10.0.0.4"}], "ports": [{"port": 80}]}]}),
            json!(["web", "10.0.0.1:80,10.0.0.2:80,10.0.0.3:80 + 1 more...", "5s"]),
        );
        check(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            json!({"metadata": {"name": "b", "creationTimestamp": ago(5)}, "roleRef": {"kind": "Role", "name": "reader"},
                "subjects": [{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "name": "default", "namespace": "dev"}]}),
            json!(["b", "Role/reader", "5s", "alice", "", "dev/default"]),
        );
    }

    #[test]
    fn an_hpa_shows_its_reference_and_current_over_target_metrics() {
        let spec = json!({"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": 1, "maxReplicas": 5,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}]});
        check(
            "autoscaling/v2",
            "HorizontalPodAutoscaler",
            json!({"metadata": {"name": "web", "creationTimestamp": ago(5)}, "spec": spec}),
            json!(["web", "Deployment/web", "cpu: <unknown>/50%", "1", 5, 0, "5s"]),
        );
        check(
            "autoscaling/v2",
            "HorizontalPodAutoscaler",
            json!({"metadata": {"name": "web", "creationTimestamp": ago(5)}, "spec": spec, "status": {"currentReplicas": 2,
                "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 40, "averageValue": "40m"}}}]}}),
            json!(["web", "Deployment/web", "cpu: 40%/50%", "1", 5, 2, "5s"]),
        );
        // v1 objects print the same row, through conversion.
        check(
            "autoscaling/v1",
            "HorizontalPodAutoscaler",
            json!({"metadata": {"name": "web", "creationTimestamp": ago(5)}, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"},
                "maxReplicas": 3, "targetCPUUtilizationPercentage": 50}, "status": {"currentReplicas": 1, "desiredReplicas": 1, "currentCPUUtilizationPercentage": 7}}),
            json!(["web", "Deployment/web", "cpu: 7%/50%", "<unset>", 3, 1, "5s"]),
        );
        let names: Vec<Value> =
            column_definitions("autoscaling/v2", "HorizontalPodAutoscaler").iter().map(|c| c["name"].clone()).collect();
        assert_eq!(
            names,
            json!(["Name", "Reference", "Targets", "MinPods", "MaxPods", "Replicas", "Age"])
                .as_array()
                .unwrap()
                .clone()
        );
    }

    #[test]
    fn hpa_targets_beyond_two_are_counted() {
        let m = |name: &str, v: &str| json!({"type": "Resource", "resource": {"name": name, "target": {"type": "AverageValue", "averageValue": v}}});
        let specs = [m("cpu", "500m"), m("memory", "100Mi"), m("ephemeral-storage", "1Gi")];
        assert_eq!(hpa_targets(&specs, &[]), "cpu: <unknown>/500m, memory: <unknown>/100Mi + 1 more...");
        assert_eq!(hpa_targets(&[], &[]), "<none>");
    }

    #[test]
    fn an_apiservice_shows_its_service_or_local_and_its_available_condition_with_the_reason() {
        let local = json!({"metadata": {"name": "v1.apps", "creationTimestamp": ago(5)}, "spec": {"group": "apps"},
            "status": {"conditions": [{"type": "Available", "status": "True", "reason": "Local"}]}});
        check("apiregistration.k8s.io/v1", "APIService", local, json!(["v1.apps", "Local", "True", "5s"]));
        let remote = json!({"metadata": {"name": "v1.x.io", "creationTimestamp": ago(5)},
            "spec": {"service": {"namespace": "ns", "name": "api"}},
            "status": {"conditions": [{"type": "Available", "status": "False", "reason": "MissingEndpoints"}]}});
        assert_eq!(
            row_cells("apiregistration.k8s.io/v1", "APIService", &remote, now())[1..3],
            [json!("ns/api"), json!("False (MissingEndpoints)")]
        );
        let unknown = json!({"metadata": {"name": "v1.x.io"}, "spec": {}});
        assert_eq!(row_cells("apiregistration.k8s.io/v1", "APIService", &unknown, now())[2], json!("Unknown"));
        assert_eq!(column_definitions("apiregistration.k8s.io/v1", "APIService").len(), 4);
    }

    #[test]
    fn other_kinds_get_the_default_table() {
        check(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            json!({"metadata": {"name": "admin", "creationTimestamp": "2024-01-02T03:04:05Z"}}),
            json!(["admin", "2024-01-02T03:04:05Z"]),
        );
        check(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            json!({"metadata": {"name": "w.example.com", "creationTimestamp": "2024-01-02T03:04:05Z"}}),
            json!(["w.example.com", "2024-01-02T03:04:05Z"]),
        );
        check(
            "example.com/v1",
            "Widget",
            json!({"metadata": {"name": "w", "creationTimestamp": ago(7200)}}),
            json!(["w", "120m"]),
        );
        assert_eq!(column_definitions("rbac.authorization.k8s.io/v1", "Role")[1]["name"], "Created At");
    }
}
