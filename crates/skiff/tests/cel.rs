//! End to end with the real kubectl: CEL in the API server — a CRD's `x-kubernetes-validations`
//! (messages, transition rules, a rule that does not compile refused at CRD create, `pattern`),
//! and ValidatingAdmissionPolicies (a Deployment over a ConfigMap's replica limit denied, a
//! `Warn` binding's warning printed by kubectl).

mod common;

use common::Server;

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: scalers.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: scalers, singular: scaler, kind: Scaler}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: self.minReplicas <= self.maxReplicas
              message: minReplicas cannot be larger than maxReplicas
            - rule: self.owner == oldSelf.owner
              message: owner is immutable
            properties:
              minReplicas: {type: integer}
              maxReplicas: {type: integer}
              owner: {type: string, pattern: '^[a-z]+$'}
              tags: {type: array, items: {type: string}}
"#;

fn scaler(name: &str, min: i64, max: i64, owner: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Scaler\nmetadata:\n  name: {name}\nspec:\n  minReplicas: {min}\n  maxReplicas: {max}\n  owner: {owner}\n"
    )
}

#[test]
fn a_crd_with_cel_rules_rejects_bad_objects_with_the_rules_message() {
    let s = Server::start();
    s.ok_stdin(&["apply", "-f", "-"], CRD);
    s.ok(&["wait", "--for", "condition=Established", "crd/scalers.example.com", "--timeout=30s"]);

    assert!(
        s.ok_stdin(&["apply", "-f", "-"], &scaler("good", 1, 3, "alice")).contains("scaler.example.com/good created")
    );
    let out = s.apply_stdin(&["apply", "-f", "-"], &scaler("bad", 5, 1, "alice"));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            r#"The Scaler "bad" is invalid: spec: Invalid value: "object": minReplicas cannot be larger than maxReplicas"#
        ),
        "{err}"
    );
    let out = s.apply_stdin(&["apply", "-f", "-"], &scaler("shouting", 1, 2, "ALICE"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(r#"spec.owner: Invalid value: "ALICE": spec.owner in body should match '^[a-z]+$'"#), "{err}");

    // The transition rule: only on update, against the stored value.
    let err = s.fails(&["patch", "scaler", "good", "--type=merge", "-p", r#"{"spec":{"owner":"bob"}}"#]);
    assert!(err.contains(r#"spec: Invalid value: "object": owner is immutable"#), "{err}");
    s.ok(&["patch", "scaler", "good", "--type=merge", "-p", r#"{"spec":{"maxReplicas":4}}"#]);
    assert_eq!(s.json(&["get", "scaler", "good"])["spec"]["maxReplicas"], 4);
}

#[test]
fn a_crd_whose_rule_does_not_compile_is_refused_at_create() {
    let s = Server::start();
    let broken = CRD.replace("rule: self.minReplicas <= self.maxReplicas", "rule: self.minReplicas <=");
    let out = s.apply_stdin(&["apply", "-f", "-"], &broken);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{Rule:\"self.minReplicas <=\""),
        "{err}"
    );
    assert!(err.contains("compilation failed: ERROR: <input>:1:"), "{err}");
    let over_budget =
        CRD.replace("rule: self.minReplicas <= self.maxReplicas", "rule: self.tags.all(a, self.tags.all(b, a == b))");
    let err = String::from_utf8_lossy(&s.apply_stdin(&["apply", "-f", "-"], &over_budget).stderr).into_owned();
    assert!(err.contains("estimated rule cost exceeds budget by factor of"), "{err}");
}

const POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: replica-limit
spec:
  failurePolicy: Fail
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [deployments]
  validations:
  - expression: object.spec.replicas <= int(params.data.maxReplicas)
    messageExpression: "'replicas must be no greater than ' + params.data.maxReplicas"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: replica-limits
  namespace: default
data:
  maxReplicas: "5"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: replica-limit-binding
spec:
  policyName: replica-limit
  validationActions: [Deny]
  paramRef:
    name: replica-limits
    namespace: default
    parameterNotFoundAction: Deny
"#;

const WARN_POLICY: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: require-team-label
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE]
      resources: [deployments]
  validations:
  - expression: "'team' in object.metadata.?labels.orValue({})"
    message: every Deployment should name its team
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: require-team-label-warn
spec:
  policyName: require-team-label
  validationActions: [Warn]
"#;

#[test]
fn a_validating_admission_policy_denies_deployments_over_the_configmaps_limit_and_warns() {
    let s = Server::start();
    let out = s.ok_stdin(&["apply", "-f", "-"], POLICY);
    assert!(out.contains("validatingadmissionpolicy.admissionregistration.k8s.io/replica-limit created"), "{out}");
    let policies = s.ok(&["get", "validatingadmissionpolicies"]);
    assert!(policies.contains("replica-limit"), "{policies}");

    // The policy takes effect once the server's admission has seen it (a watch away).
    let err = s.eventually(30, "the policy to deny", || {
        let out = s.kubectl(&["create", "deployment", "big", "--image=registry.k8s.io/pause:3.10", "--replicas=6"]);
        (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
    });
    assert!(
        err.contains(
            "deployments.apps \"big\" is forbidden: ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-binding' denied request: replicas must be no greater than 5"
        ),
        "{err}"
    );
    s.ok(&["create", "deployment", "small", "--image=registry.k8s.io/pause:3.10", "--replicas=5"]);
    // An update of the main resource is checked too (`kubectl scale` writes the `scale`
    // subresource, which a rule naming only `deployments` does not match, as upstream).
    let err = s.fails(&["patch", "deployment", "small", "--type=merge", "-p", r#"{"spec":{"replicas":7}}"#]);
    assert!(err.contains("replicas must be no greater than 5"), "{err}");

    // Raising the limit in the ConfigMap is seen by the next request.
    s.ok(&["patch", "configmap", "replica-limits", "--type=merge", "-p", r#"{"data":{"maxReplicas":"10"}}"#]);
    s.eventually(30, "the new limit", || {
        s.kubectl(&["create", "deployment", "big", "--image=registry.k8s.io/pause:3.10", "--replicas=6"])
            .status
            .success()
            .then_some(())
    });

    // A Warn binding: kubectl prints the warning and the create goes through.
    s.ok_stdin(&["apply", "-f", "-"], WARN_POLICY);
    let warning = s.eventually(30, "the policy's warning", || {
        let out = s.kubectl(&["create", "deployment", "anon", "--image=registry.k8s.io/pause:3.10"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        if err.contains("Warning:") {
            return Some(err);
        }
        s.ok(&["delete", "deployment", "anon"]);
        None
    });
    assert!(
        warning.contains(
            "Warning: Validation failed for ValidatingAdmissionPolicy 'require-team-label' with binding 'require-team-label-warn': every Deployment should name its team"
        ),
        "{warning}"
    );
}

#[test]
fn an_invalid_policy_is_refused_with_field_causes() {
    let s = Server::start();
    let bad = POLICY.replace("object.spec.replicas <= int(params.data.maxReplicas)", "object.spec.replicas <=");
    let out = s.apply_stdin(&["apply", "-f", "-"], &bad);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(r#"spec.validations[0].expression: Invalid value: "object.spec.replicas <=": compilation failed: ERROR: <input>:1:"#),
        "{err}"
    );
}
