//! Name and label syntax checks with Kubernetes' wording (`k8s.io/apimachinery/pkg/util/validation`).
//!
//! Each `is_*` function returns the list of problems with a value, empty when it is valid, worded
//! exactly as Kubernetes words them so that kubectl users see familiar messages, e.g.
//! `a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must
//! start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for
//! validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`. Hand-written matchers replace the regexes
//! quoted in the messages.

/// Longest DNS-1123 label (RFC 1123): 63 characters.
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// Longest DNS-1123 subdomain: 253 characters.
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// Longest name part of a qualified name (label and annotation keys): 63 characters.
pub const QUALIFIED_NAME_MAX_LENGTH: usize = 63;
/// Longest label value: 63 characters.
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;
/// Longest DNS-1035 label (Service names): 63 characters.
pub const DNS1035_LABEL_MAX_LENGTH: usize = 63;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_ERR: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const CONFIG_MAP_KEY_FMT: &str = "[-._a-zA-Z0-9]+";
const CONFIG_MAP_KEY_ERR: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'";
const C_IDENTIFIER_FMT: &str = "[A-Za-z_][A-Za-z0-9_]*";
const C_IDENTIFIER_ERR: &str = "a valid C identifier must start with alphabetic character or '_', followed by a string of alphanumeric characters or '_'";
const IANA_SVC_NAME_ERR_LEN: &str = "must be no more than 15 characters";

/// `must be no more than N characters`.
pub fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// `must be non-empty`.
pub fn empty_error() -> String {
    "must be non-empty".to_string()
}

/// Kubernetes' `RegexError`: the message, examples and the regex, e.g.
/// `... (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '...')`.
/// (The doubled space after each example's comma is Kubernetes' own.)
pub fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(e);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(fmt);
    out.push_str("')");
    out
}

fn lower_alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// Matches `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn matches_dns1123_label(s: &str) -> bool {
    let b: Vec<char> = s.chars().collect();
    match (b.first(), b.last()) {
        (Some(&f), Some(&l)) => lower_alnum(f) && lower_alnum(l) && b.iter().all(|&c| lower_alnum(c) || c == '-'),
        _ => false,
    }
}

/// Matches `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn matches_qualified_name(s: &str) -> bool {
    let b: Vec<char> = s.chars().collect();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        }
        _ => false,
    }
}

/// `IsDNS1123Label`: lowercase alphanumerics and '-', at most 63 characters (namespace names,
/// container names, most `name` fields of list elements).
pub fn is_dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns1123_label(value) {
        errs.push(regex_error(DNS1123_LABEL_ERR, DNS1123_LABEL_FMT, &["my-name", "123-abc"]));
    }
    errs
}

/// `IsDNS1123Subdomain`: dot-separated DNS-1123 labels, at most 253 characters (most object names).
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if value.is_empty() || !value.split('.').all(matches_dns1123_label) {
        errs.push(regex_error(DNS1123_SUBDOMAIN_ERR, DNS1123_SUBDOMAIN_FMT, &["example.com"]));
    }
    errs
}

/// `IsDNS1035Label`: like a DNS-1123 label but starting with a letter (Service names).
pub fn is_dns1035_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1035_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1035_LABEL_MAX_LENGTH));
    }
    let starts_alpha = value.chars().next().is_some_and(|c| c.is_ascii_lowercase());
    if !starts_alpha || !matches_dns1123_label(value) {
        errs.push(regex_error(DNS1035_LABEL_ERR, DNS1035_LABEL_FMT, &["my-name", "abc-123"]));
    }
    errs
}

/// `IsQualifiedName`: an optional DNS-1123 subdomain prefix and '/', then a name of at most 63
/// alphanumerics, '-', '_' or '.' (label keys, annotation keys, finalizer names).
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push(format!("prefix part {}", empty_error()));
            } else {
                errs.extend(is_dns1123_subdomain(prefix).into_iter().map(|m| format!("prefix part {m}")));
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_ERR, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push(format!("name part {}", empty_error()));
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        errs.push(format!("name part {}", max_len_error(QUALIFIED_NAME_MAX_LENGTH)));
    }
    if !matches_qualified_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(QUALIFIED_NAME_ERR, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
        ));
    }
    errs
}

/// `IsValidLabelValue`: empty, or at most 63 alphanumerics, '-', '_' or '.' starting and ending
/// with an alphanumeric.
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !value.is_empty() && !matches_qualified_name(value) {
        errs.push(regex_error(LABEL_VALUE_ERR, LABEL_VALUE_FMT, &["MyValue", "my_value", "12345"]));
    }
    errs
}

/// `IsConfigMapKey`: keys of ConfigMap and Secret `data` (alphanumerics, '-', '_', '.'; not `.`
/// or `..`, not starting with `..`; at most 253 characters).
pub fn is_config_map_key(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if value.is_empty() || !value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        errs.push(regex_error(CONFIG_MAP_KEY_ERR, CONFIG_MAP_KEY_FMT, &["key.name", "KEY_NAME", "key-name"]));
    }
    if value == "." {
        errs.push("must not be '.'".to_string());
    } else if value == ".." {
        errs.push("must not be '..'".to_string());
    } else if value.starts_with("..") {
        errs.push("must not start with '..'".to_string());
    }
    errs
}

/// `IsCIdentifier`: environment variable names in the strict sense (Kubernetes 1.33 accepts any
/// printable ASCII except '=' for env names; see [`is_env_var_name`]).
pub fn is_c_identifier(value: &str) -> Vec<String> {
    let mut chars = value.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Vec::new()
    } else {
        vec![regex_error(C_IDENTIFIER_ERR, C_IDENTIFIER_FMT, &["my_name", "MY_NAME", "MyName"])]
    }
}

/// `IsEnvVarName` as relaxed in Kubernetes 1.32+ (RelaxedEnvironmentVariableValidation, GA in
/// 1.33): printable ASCII characters other than '='.
pub fn is_env_var_name(value: &str) -> Vec<String> {
    if !value.is_empty() && value.chars().all(|c| (' '..='~').contains(&c) && c != '=') {
        Vec::new()
    } else {
        vec![
            "a valid environment variable name must consist only of printable ASCII characters other than '='"
                .to_string(),
        ]
    }
}

/// `IsValidPortNum`: 1-65535.
pub fn is_valid_port_num(port: i64) -> Vec<String> {
    if (1..=65535).contains(&port) { Vec::new() } else { vec!["must be between 1 and 65535, inclusive".to_string()] }
}

/// `IsValidPortName`: an IANA service name (at most 15 lowercase alphanumerics or '-', at least
/// one letter, no leading/trailing/double '-').
pub fn is_valid_port_name(port: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if port.is_empty() || port.len() > 15 {
        errs.push(IANA_SVC_NAME_ERR_LEN.to_string());
    }
    if !port.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string());
    }
    if !port.chars().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_string());
    }
    if port.contains("--") {
        errs.push("must not contain consecutive hyphens".to_string());
    }
    if port.starts_with('-') || port.ends_with('-') {
        errs.push("must not begin or end with a hyphen".to_string());
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1123_subdomain_accepts_dotted_names_and_rejects_uppercase() {
        let cases = [
            ("example.com", true),
            ("a", true),
            ("nginx-1", true),
            ("Nginx", false),
            ("-a", false),
            ("a.", false),
            ("a..b", false),
            ("", false),
        ];
        for (value, ok) in cases {
            assert_eq!(is_dns1123_subdomain(value).is_empty(), ok, "{value}");
        }
        assert_eq!(
            is_dns1123_subdomain("A")[0],
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        );
        assert_eq!(is_dns1123_subdomain(&"a".repeat(254))[0], "must be no more than 253 characters");
    }

    #[test]
    fn dns1123_label_rejects_dots_and_long_names() {
        let cases = [("my-name", true), ("123-abc", true), ("a.b", false), ("a_b", false)];
        for (value, ok) in cases {
            assert_eq!(is_dns1123_label(value).is_empty(), ok, "{value}");
        }
        assert_eq!(is_dns1123_label(&"a".repeat(64)).len(), 1);
    }

    #[test]
    fn qualified_names_allow_a_dns_prefix() {
        let cases = [
            ("app", true),
            ("app.kubernetes.io/name", true),
            ("A_b.c", true),
            ("/name", false),
            ("a/b/c", false),
            ("Example.com/x", false),
            ("a b", false),
            ("", false),
        ];
        for (value, ok) in cases {
            assert_eq!(is_qualified_name(value).is_empty(), ok, "{value}");
        }
        assert_eq!(
            is_qualified_name("a b"),
            vec![
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
            ]
        );
    }

    #[test]
    fn label_values_may_be_empty_but_not_longer_than_63() {
        assert!(is_valid_label_value("").is_empty());
        assert!(is_valid_label_value("v1.2_3-x").is_empty());
        assert!(!is_valid_label_value("-x").is_empty());
        assert_eq!(is_valid_label_value(&"a".repeat(64)), vec!["must be no more than 63 characters"]);
    }

    #[test]
    fn config_map_keys_reject_dot_dot() {
        assert!(is_config_map_key("app.properties").is_empty());
        assert_eq!(is_config_map_key(".."), vec!["must not be '..'"]);
        assert_eq!(is_config_map_key("..a"), vec!["must not start with '..'"]);
        assert!(!is_config_map_key("a/b").is_empty());
    }

    #[test]
    fn dns1035_labels_must_start_with_a_letter() {
        assert!(is_dns1035_label("web").is_empty());
        assert!(!is_dns1035_label("1web").is_empty());
    }

    #[test]
    fn port_names_follow_iana_rules() {
        assert!(is_valid_port_name("http").is_empty());
        assert!(!is_valid_port_name("80").is_empty());
        assert!(!is_valid_port_name("a--b").is_empty());
        assert!(!is_valid_port_name("very-long-port-name").is_empty());
    }
}
