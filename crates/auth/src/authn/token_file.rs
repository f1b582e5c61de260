//! Static token file authentication (`--token-auth-file`,
//! <https://kubernetes.io/docs/reference/access-authn-authz/authentication/#static-token-file>):
//! a CSV file with at least three columns, `token,user,uid`, and an optional fourth column of
//! comma-separated groups, which must be quoted when it holds more than one:
//! `31ada4fd-adec-460c-809a-9e56ceb75269,jane,1001,"dev,ops"`.

use std::collections::HashMap;
use std::path::Path;

use super::{AuthnError, TokenAuthenticator};
use crate::user::UserInfo;

/// Tokens from a token file.
#[derive(Debug, Clone, Default)]
pub struct TokenFileAuthenticator {
    tokens: HashMap<String, UserInfo>,
}

/// Splits one CSV record (RFC 4180 quoting; leading spaces of a field are trimmed, as Go's
/// `csv.Reader` with `TrimLeadingSpace` does).
fn parse_record(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') || chars.peek() == Some(&'\t') {
            chars.next();
        }
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => return Err("extraneous or missing \" in quoted-field".into()),
                }
            }
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => fields.push(field),
                Some(_) => return Err("extraneous or missing \" in quoted-field".into()),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(field);
                        return Ok(fields);
                    }
                    Some(',') => {
                        fields.push(field);
                        break;
                    }
                    Some('"') => return Err("bare \" in non-quoted-field".into()),
                    Some(c) => field.push(c),
                }
            }
        }
    }
}

impl TokenFileAuthenticator {
    /// Parses token-file contents; `path` only names the file in errors. Empty lines and lines
    /// starting with `#` are skipped; records with an empty token are skipped; a later duplicate
    /// token replaces an earlier one.
    ///
    /// # Errors
    /// `token file '<path>' must have at least 3 columns (token, user name, user uid), found N`,
    /// or a CSV syntax error with its line number.
    pub fn parse(contents: &str, path: &str) -> Result<Self, String> {
        let mut tokens = HashMap::new();
        for (i, line) in contents.lines().enumerate() {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let record = parse_record(line).map_err(|e| format!("token file '{path}', line {}: {e}", i + 1))?;
            if record.len() < 3 {
                return Err(format!(
                    "token file '{path}' must have at least 3 columns (token, user name, user uid), found {}",
                    record.len()
                ));
            }
            if record[0].is_empty() {
                tracing::warn!("empty token in token file '{path}', line {}", i + 1);
                continue;
            }
            let groups = match record.get(3) {
                Some(g) if !g.is_empty() => g.split(',').map(str::to_string).collect(),
                _ => Vec::new(),
            };
            let user = UserInfo { name: record[1].clone(), uid: record[2].clone(), groups, ..Default::default() };
            if tokens.insert(record[0].clone(), user).is_some() {
                tracing::warn!("duplicate token in token file '{path}', line {}", i + 1);
            }
        }
        Ok(Self { tokens })
    }

    /// Reads and parses a token file.
    ///
    /// # Errors
    /// The file cannot be read, or [`TokenFileAuthenticator::parse`] fails.
    pub fn load(path: &Path) -> Result<Self, String> {
        let contents =
            std::fs::read_to_string(path).map_err(|e| format!("reading token file '{}': {e}", path.display()))?;
        Self::parse(&contents, &path.display().to_string())
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the file held no token.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

impl TokenAuthenticator for TokenFileAuthenticator {
    fn authenticate_token(&self, token: &str) -> Result<Option<UserInfo>, AuthnError> {
        Ok(self.tokens.get(token).cloned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_records_parse_into_users() {
        let file = "\
# comment
token1,jane,1001,\"dev,ops\"
token2, bob, 1002
token3,svc,1003,single
\"tok,4\",\"quo\"\"ted\",1004,
,skipped,1005
";
        let a = TokenFileAuthenticator::parse(file, "/etc/tokens.csv").unwrap();
        assert_eq!(a.len(), 4);
        let cases = [
            ("token1", Some(("jane", "1001", vec!["dev", "ops"]))),
            ("token2", Some(("bob", "1002", vec![]))),
            ("token3", Some(("svc", "1003", vec!["single"]))),
            ("tok,4", Some(("quo\"ted", "1004", vec![]))),
            ("", None),
            ("nope", None),
        ];
        for (token, want) in cases {
            let got = a.authenticate_token(token).unwrap();
            let got = got
                .as_ref()
                .map(|u| (u.name.as_str(), u.uid.as_str(), u.groups.iter().map(String::as_str).collect::<Vec<_>>()));
            assert_eq!(got, want, "{token}");
        }
    }

    #[test]
    fn malformed_token_files_are_rejected_with_kubernetes_messages() {
        assert_eq!(
            TokenFileAuthenticator::parse("token,user\n", "/t.csv").unwrap_err(),
            "token file '/t.csv' must have at least 3 columns (token, user name, user uid), found 2"
        );
        assert!(TokenFileAuthenticator::parse("a,\"b,1\n", "/t.csv").unwrap_err().contains("line 1"));
        assert!(TokenFileAuthenticator::parse("a,b\"c,1\n", "/t.csv").is_err());
        assert!(TokenFileAuthenticator::load(Path::new("/nonexistent/tokens.csv")).is_err());
    }

    #[test]
    fn duplicate_tokens_keep_the_last_record() {
        let a = TokenFileAuthenticator::parse("t,first,1\nt,second,2\n", "f").unwrap();
        assert_eq!(a.authenticate_token("t").unwrap().unwrap().name, "second");
    }
}
