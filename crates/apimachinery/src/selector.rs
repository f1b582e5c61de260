//! Label selectors (`labels.Parse`, `metav1.LabelSelector`) and field selectors (`fields.ParseSelector`).
//!
//! Grammar and semantics follow Kubernetes' "Labels and Selectors" concept page
//! (<https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors>) and
//! "Field Selectors" (<https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/>):
//!
//! - label selector: comma-separated requirements, all of which must hold: `key=value`,
//!   `key==value`, `key!=value`, `key in (v1,v2)`, `key notin (v1)`, `key` (exists), `!key`
//!   (does not exist), `key>1`, `key<1` (integer comparison). Keys are qualified names, values
//!   label values; whitespace around tokens is ignored.
//! - field selector: comma-separated `field=value`, `field==value`, `field!=value`; `\,`, `\=` and
//!   `\\` escape those characters in values.
//!
//! A missing `metav1.LabelSelector` (`nil` in Go) selects nothing when it is a workload's
//! selector (`LabelSelectorAsSelector(nil)` is `labels.Nothing()`), while an empty one (`{}`) selects
//! everything: see [`LabelSelector::from_metav1_opt`].

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;

use crate::names;

/// A label selector operator (`selection.Operator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `key`: the label is present.
    Exists,
    /// `!key`: the label is absent.
    DoesNotExist,
    /// `key=value`.
    Equals,
    /// `key==value` (same meaning as `=`; kept for printing).
    DoubleEquals,
    /// `key!=value`: the label is absent or has another value.
    NotEquals,
    /// `key in (a,b)`.
    In,
    /// `key notin (a,b)`: the label is absent or has none of the values.
    NotIn,
    /// `key>n`: the label's value is an integer greater than n.
    GreaterThan,
    /// `key<n`: the label's value is an integer less than n.
    LessThan,
}

/// One requirement of a [`LabelSelector`] (`labels.Requirement`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    /// Sorted, without duplicates.
    values: Vec<String>,
}

fn label_key_error(path: &str, key: &str) -> Option<String> {
    let errs = names::is_qualified_name(key);
    if errs.is_empty() { None } else { Some(format!("{path}: Invalid value: {key:?}: {}", errs.join("; "))) }
}

impl Requirement {
    /// Builds a requirement, validating the key (qualified name), the values (label values) and the
    /// value count for the operator, with Kubernetes' messages (`labels.NewRequirement`).
    ///
    /// # Errors
    /// The error list joined as Kubernetes aggregates it (`[a, b]` when more than one).
    pub fn new(key: &str, operator: Operator, values: Vec<String>) -> Result<Self, String> {
        let mut errs = Vec::new();
        if let Some(e) = label_key_error("key", key) {
            errs.push(e);
        }
        let shown = format!("{values:?}");
        match operator {
            Operator::In | Operator::NotIn if values.is_empty() => errs.push(format!(
                "values: Invalid value: {shown}: for 'in', 'notin' operators, values set can't be empty"
            )),
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals if values.len() != 1 => errs
                .push(format!("values: Invalid value: {shown}: exact-match compatibility requires one single value")),
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => errs.push(format!(
                "values: Invalid value: {shown}: values set must be empty for exists and does not exist"
            )),
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errs.push(format!(
                        "values: Invalid value: {shown}: for 'Gt', 'Lt' operators, exactly one value is required"
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    if v.parse::<i64>().is_err() {
                        errs.push(format!(
                            "values[{i}]: Invalid value: {v:?}: for 'Gt', 'Lt' operators, the value must be an integer"
                        ));
                    }
                }
            }
            _ => {}
        }
        for (i, v) in values.iter().enumerate() {
            let problems = names::is_valid_label_value(v);
            if !problems.is_empty() {
                errs.push(format!("values[{i}][{key}]: Invalid value: {v:?}: {}", problems.join("; ")));
            }
        }
        match errs.len() {
            0 => {
                let mut values = values;
                values.sort();
                values.dedup();
                Ok(Self { key: key.to_string(), operator, values })
            }
            1 => Err(errs.remove(0)),
            _ => Err(format!("[{}]", errs.join(", "))),
        }
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, sorted and deduplicated (empty for `Exists`/`DoesNotExist`).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether a label set satisfies this requirement (`Requirement.Matches`).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => value.is_some_and(|v| self.values.contains(v)),
            Operator::NotIn | Operator::NotEquals => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let (Some(have), [want]) = (value.and_then(|v| v.parse::<i64>().ok()), self.values.as_slice()) else {
                    return false;
                };
                let Ok(want) = want.parse::<i64>() else { return false };
                if self.operator == Operator::GreaterThan { have > want } else { have < want }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let op = match self.operator {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => " in ",
            Operator::NotIn => " notin ",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
        };
        f.write_str(op)?;
        let set = matches!(self.operator, Operator::In | Operator::NotIn);
        if set {
            f.write_str("(")?;
        }
        f.write_str(&self.values.join(","))?;
        if set {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A parsed label selector: the conjunction of its [`Requirement`]s.
///
/// `Display` prints the canonical form Kubernetes prints (requirements sorted by key, values
/// sorted): `app=nginx,tier in (backend,frontend)`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl LabelSelector {
    /// Selects every object (the empty selector).
    pub fn everything() -> Self {
        Self::default()
    }

    /// Selects no object (`labels.Nothing()`, what a missing workload selector means).
    pub fn nothing() -> Self {
        Self { requirements: Vec::new(), nothing: true }
    }

    /// Builds a selector from requirements (sorted by key, as `Selector.Add` does).
    pub fn from_requirements(mut requirements: Vec<Requirement>) -> Self {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Self { requirements, nothing: false }
    }

    /// `labels.SelectorFromSet`: `key=value` for each entry (Service and ReplicationController
    /// selectors). Entries that are not valid label keys/values are rejected.
    ///
    /// # Errors
    /// The first invalid key or value, worded as [`Requirement::new`] words it.
    pub fn from_map(set: &BTreeMap<String, String>) -> Result<Self, String> {
        let requirements = set
            .iter()
            .map(|(k, v)| Requirement::new(k, Operator::Equals, vec![v.clone()]))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::from_requirements(requirements))
    }

    /// Parses the string form (`labels.Parse`), e.g. `app=nginx,tier in (a,b),!canary`.
    ///
    /// # Errors
    /// A message in Kubernetes' wording, e.g. `found ',', expected: identifier after ','` or
    /// `unable to parse requirement: values[0][app]: Invalid value: "a b": ...`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let tokens = lex(s);
        let mut p = Parser { tokens, pos: 0 };
        let requirements = p.parse()?;
        Ok(Self::from_requirements(requirements))
    }

    /// Converts a `metav1.LabelSelector` (`metav1.LabelSelectorAsSelector`): `matchLabels` become
    /// `key=value`, `matchExpressions` use `In`, `NotIn`, `Exists`, `DoesNotExist`. An empty selector
    /// selects everything.
    ///
    /// # Errors
    /// An unknown operator (`"Foo" is not a valid label selector operator`) or invalid keys/values.
    pub fn from_metav1(sel: &metav1::LabelSelector) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            requirements.push(Requirement::new(k, Operator::Equals, vec![v.clone()])?);
        }
        for expr in sel.match_expressions.iter().flatten() {
            let op = match expr.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => return Err(format!("{other:?} is not a valid label selector operator")),
            };
            requirements.push(Requirement::new(&expr.key, op, expr.values.clone().unwrap_or_default())?);
        }
        Ok(Self::from_requirements(requirements))
    }

    /// Like [`LabelSelector::from_metav1`], but a missing selector selects nothing.
    ///
    /// # Errors
    /// As [`LabelSelector::from_metav1`].
    pub fn from_metav1_opt(sel: Option<&metav1::LabelSelector>) -> Result<Self, String> {
        match sel {
            None => Ok(Self::nothing()),
            Some(s) => Self::from_metav1(s),
        }
    }

    /// Converts a raw JSON `metav1.LabelSelector` (`{"matchLabels":{...},"matchExpressions":[...]}`).
    ///
    /// # Errors
    /// A JSON shape error, or as [`LabelSelector::from_metav1`].
    pub fn from_json(v: &serde_json::Value) -> Result<Self, String> {
        let sel: metav1::LabelSelector = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
        Self::from_metav1(&sel)
    }

    /// Whether the labels satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Like [`LabelSelector::matches`] for the `metadata.labels` object of a raw JSON object.
    pub fn matches_object(&self, obj: &serde_json::Value) -> bool {
        let labels = labels_of(obj);
        self.matches(&labels)
    }

    /// Whether the selector has no requirements (selects everything, unless it is
    /// [`LabelSelector::nothing`]).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether this is [`LabelSelector::nothing`].
    pub fn is_nothing(&self) -> bool {
        self.nothing
    }

    /// The requirements, sorted by key.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }
}

/// The string labels of a raw JSON object's `metadata.labels` (non-string values are skipped).
pub fn labels_of(obj: &serde_json::Value) -> BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(|l| l.as_object())
        .map(|m| m.iter().filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string()))).collect())
        .unwrap_or_default()
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for LabelSelector {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse(s)
    }
}

// ---------------------------------------------------------------------------------------------
// Lexer and parser for the label selector string form.

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    End,
    Identifier,
    DoesNotExist,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    In,
    NotIn,
    OpenPar,
    ClosedPar,
    Comma,
    Error,
}

fn is_special(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn symbol(s: &str) -> Option<Tok> {
    Some(match s {
        "!" => Tok::DoesNotExist,
        "!=" => Tok::NotEquals,
        "(" => Tok::OpenPar,
        ")" => Tok::ClosedPar,
        "," => Tok::Comma,
        "=" => Tok::Equals,
        "==" => Tok::DoubleEquals,
        ">" => Tok::GreaterThan,
        "<" => Tok::LessThan,
        _ => return None,
    })
}

fn lex(s: &str) -> Vec<(Tok, String)> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < chars.len() && matches!(chars[i], ' ' | '\t' | '\r' | '\n') {
            i += 1;
        }
        if i >= chars.len() {
            out.push((Tok::End, String::new()));
            return out;
        }
        if is_special(chars[i]) {
            // Longest special symbol starting here.
            let mut buf = String::new();
            let mut last: Option<(Tok, String, usize)> = None;
            let mut j = i;
            while j < chars.len() && is_special(chars[j]) {
                buf.push(chars[j]);
                j += 1;
                if let Some(t) = symbol(&buf) {
                    last = Some((t, buf.clone(), j));
                } else if last.is_some() {
                    break;
                }
            }
            match last {
                Some((t, lit, end)) => {
                    out.push((t, lit));
                    i = end;
                }
                None => {
                    out.push((Tok::Error, format!("error expected: keyword found '{buf}'")));
                    out.push((Tok::End, String::new()));
                    return out;
                }
            }
        } else {
            let start = i;
            while i < chars.len() && !is_special(chars[i]) && !matches!(chars[i], ' ' | '\t' | '\r' | '\n') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let tok = match word.as_str() {
                "in" => Tok::In,
                "notin" => Tok::NotIn,
                _ => Tok::Identifier,
            };
            out.push((tok, word));
        }
    }
}

struct Parser {
    tokens: Vec<(Tok, String)>,
    pos: usize,
}

/// Whether `in`/`notin` are keywords (operator position) or plain identifiers (keys, values).
#[derive(PartialEq)]
enum Ctx {
    KeyAndOperator,
    Values,
}

impl Parser {
    fn get(&self, i: usize, ctx: &Ctx) -> (Tok, String) {
        let (t, l) = self.tokens.get(i).cloned().unwrap_or((Tok::End, String::new()));
        if *ctx == Ctx::Values && matches!(t, Tok::In | Tok::NotIn) { (Tok::Identifier, l) } else { (t, l) }
    }

    fn lookahead(&self, ctx: Ctx) -> (Tok, String) {
        self.get(self.pos, &ctx)
    }

    fn consume(&mut self, ctx: Ctx) -> (Tok, String) {
        let r = self.get(self.pos, &ctx);
        if self.pos < self.tokens.len() {
            self.pos += 1;
        }
        r
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(Ctx::Values);
            match tok {
                Tok::Identifier | Tok::DoesNotExist => {
                    let r = self.parse_requirement().map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(r);
                    let (t, l) = self.consume(Ctx::Values);
                    match t {
                        Tok::End => return Ok(reqs),
                        Tok::Comma => {
                            let (t2, l2) = self.lookahead(Ctx::Values);
                            if t2 != Tok::Identifier && t2 != Tok::DoesNotExist {
                                return Err(format!("found '{l2}', expected: identifier after ','"));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Tok::End => return Ok(reqs),
                _ => return Err(format!("found '{lit}', expected: !, identifier, or 'end of string'")),
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, op) = self.parse_key_and_infer_operator()?;
        if let Some(op) = op {
            return Requirement::new(&key, op, Vec::new());
        }
        let op = self.parse_operator()?;
        let values = match op {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        Requirement::new(&key, op, values)
    }

    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut op = None;
        let (mut tok, mut lit) = self.consume(Ctx::Values);
        if tok == Tok::DoesNotExist {
            op = Some(Operator::DoesNotExist);
            (tok, lit) = self.consume(Ctx::Values);
        }
        if tok != Tok::Identifier {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        if let Some(e) = label_key_error("<nil>", &lit) {
            return Err(e);
        }
        let (next, _) = self.lookahead(Ctx::Values);
        if (next == Tok::End || next == Tok::Comma) && op.is_none() {
            op = Some(Operator::Exists);
        }
        Ok((lit, op))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.consume(Ctx::KeyAndOperator);
        Ok(match tok {
            Tok::In => Operator::In,
            Tok::Equals => Operator::Equals,
            Tok::DoubleEquals => Operator::DoubleEquals,
            Tok::GreaterThan => Operator::GreaterThan,
            Tok::LessThan => Operator::LessThan,
            Tok::NotIn => Operator::NotIn,
            Tok::NotEquals => Operator::NotEquals,
            _ => return Err(format!("found '{lit}', expected: in, notin, =, ==, !=, gt, lt")),
        })
    }

    fn parse_values(&mut self) -> Result<Vec<String>, String> {
        let (tok, lit) = self.consume(Ctx::Values);
        if tok != Tok::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(Ctx::Values);
        match tok {
            Tok::Identifier | Tok::Comma => {
                let s = self.parse_identifiers_list()?;
                let (t, _) = self.consume(Ctx::Values);
                if t != Tok::ClosedPar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(s)
            }
            Tok::ClosedPar => {
                self.consume(Ctx::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, String> {
        let mut s: Vec<String> = Vec::new();
        loop {
            let (tok, lit) = self.consume(Ctx::Values);
            match tok {
                Tok::Identifier => {
                    s.push(lit);
                    let (t2, l2) = self.lookahead(Ctx::Values);
                    match t2 {
                        Tok::Comma => continue,
                        Tok::ClosedPar => return Ok(s),
                        _ => return Err(format!("found '{l2}', expected: ',' or ')'")),
                    }
                }
                Tok::Comma => {
                    if s.is_empty() {
                        s.push(String::new());
                    }
                    let (t2, _) = self.lookahead(Ctx::Values);
                    if t2 == Tok::ClosedPar {
                        s.push(String::new());
                        return Ok(s);
                    }
                    if t2 == Tok::Comma {
                        self.consume(Ctx::Values);
                        s.push(String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, String> {
        let (tok, _) = self.lookahead(Ctx::Values);
        if tok == Tok::End || tok == Tok::Comma {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(Ctx::Values);
        if tok == Tok::Identifier { Ok(vec![lit]) } else { Err(format!("found '{lit}', expected: identifier")) }
    }
}

// ---------------------------------------------------------------------------------------------
// Field selectors.

/// A field selector operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    /// `field=value` or `field==value`.
    Equals,
    /// `field!=value`.
    NotEquals,
}

/// One term of a [`FieldSelector`]: `field`, operator, unescaped `value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    /// The field path, e.g. `status.phase`.
    pub field: String,
    /// `=`/`==` or `!=`.
    pub operator: FieldOperator,
    /// The value, with `\,`, `\=`, `\\` unescaped.
    pub value: String,
}

/// A parsed field selector (`fields.ParseSelector`): the conjunction of its [`FieldRequirement`]s.
///
/// `Display` prints the canonical form (terms sorted, `==` as `=`, values re-escaped).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

/// Escapes `\`, `,` and `=` in a field selector value (`fields.EscapeValue`).
pub fn escape_field_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn unescape_field_value(s: &str) -> Result<String, String> {
    if !s.contains(['\\', ',', '=']) {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(format!("invalid field selector: invalid escape sequence: \\{c}"));
            }
            out.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' || c == '=' {
            return Err(format!("invalid field selector: unescaped character in value: {c}"));
        } else {
            out.push(c);
        }
    }
    if escaped {
        return Err("invalid field selector: invalid escape sequence: \\".to_string());
    }
    Ok(out)
}

/// Splits on commas not preceded by an escaping backslash (escapes are kept).
fn split_terms(s: &str) -> Vec<String> {
    let mut terms = Vec::new();
    let mut cur = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            cur.push(c);
            escaped = true;
        } else if c == ',' {
            terms.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    terms.push(cur);
    terms
}

/// The first `!=`, `==` or `=` in the term (scanning left to right, in that preference order at
/// each position).
fn split_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (op, kind) in
            [("!=", FieldOperator::NotEquals), ("==", FieldOperator::Equals), ("=", FieldOperator::Equals)]
        {
            if rest.starts_with(op) {
                return Some((&term[..i], kind, &term[i + op.len()..]));
            }
        }
    }
    None
}

impl FieldSelector {
    /// Selects every object.
    pub fn everything() -> Self {
        Self::default()
    }

    /// Parses `field=value,field!=value` (`fields.ParseSelector`).
    ///
    /// # Errors
    /// `invalid selector: '<s>'; can't understand '<term>'` for a term without operator, or an
    /// escaping error (`invalid field selector: invalid escape sequence: \x`).
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut parts = split_terms(s);
        parts.sort();
        let mut requirements = Vec::new();
        for part in parts.iter().filter(|p| !p.is_empty()) {
            let Some((field, operator, rhs)) = split_term(part) else {
                return Err(format!("invalid selector: '{s}'; can't understand '{part}'"));
            };
            let value = unescape_field_value(rhs)?;
            requirements.push(FieldRequirement { field: field.to_string(), operator, value });
        }
        Ok(Self { requirements })
    }

    /// Builds a selector of `field=value` terms.
    pub fn from_equalities<'a>(terms: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut requirements: Vec<FieldRequirement> = terms
            .into_iter()
            .map(|(f, v)| FieldRequirement {
                field: f.to_string(),
                operator: FieldOperator::Equals,
                value: v.to_string(),
            })
            .collect();
        requirements.sort_by(|a, b| (&a.field, &a.value).cmp(&(&b.field, &b.value)));
        Self { requirements }
    }

    /// Whether every term holds; `get` returns a field's value, `None` (compared as "") when the
    /// object has no such field.
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements.iter().all(|r| {
            let have = get(&r.field).unwrap_or_default();
            match r.operator {
                FieldOperator::Equals => have == r.value,
                FieldOperator::NotEquals => have != r.value,
            }
        })
    }

    /// The terms, so a server can reject unsupported fields (`field label not supported: X`).
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// Whether the selector has no terms.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The value required by an `=` term on `field`, if any (`RequiresExactMatch`; e.g. a server
    /// narrowing a list to `metadata.name`).
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == field && r.operator == FieldOperator::Equals)
            .map(|r| r.value.as_str())
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = if r.operator == FieldOperator::Equals { "=" } else { "!=" };
            write!(f, "{}{op}{}", r.field, escape_field_value(&r.value))?;
        }
        Ok(())
    }
}

impl std::str::FromStr for FieldSelector {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// Parses `selector`, checks its canonical form, then checks it against label sets.
    fn check(selector: &str, canonical: &str, cases: &[(&[(&str, &str)], bool)]) {
        let s = LabelSelector::parse(selector).unwrap_or_else(|e| panic!("{selector}: {e}"));
        assert_eq!(s.to_string(), canonical, "canonical form of {selector:?}");
        for (set, want) in cases {
            assert_eq!(s.matches(&labels(set)), *want, "{selector:?} on {set:?}");
        }
        // The canonical form parses back to the same selector.
        assert_eq!(LabelSelector::parse(canonical).unwrap(), s);
    }

    #[test]
    fn label_selectors_parse_and_match_like_kubernetes() {
        check("", "", &[(&[], true), (&[("a", "b")], true)]);
        check("app=nginx", "app=nginx", &[(&[("app", "nginx")], true), (&[("app", "x")], false), (&[], false)]);
        check("app==nginx", "app==nginx", &[(&[("app", "nginx")], true)]);
        check("app!=nginx", "app!=nginx", &[(&[("app", "nginx")], false), (&[], true), (&[("app", "x")], true)]);
        check(
            " tier in ( b , a ),app=web ",
            "app=web,tier in (a,b)",
            &[(&[("app", "web"), ("tier", "a")], true), (&[("app", "web"), ("tier", "c")], false)],
        );
        check("tier notin (a)", "tier notin (a)", &[(&[], true), (&[("tier", "a")], false), (&[("tier", "b")], true)]);
        check("canary", "canary", &[(&[("canary", "")], true), (&[], false)]);
        check("!canary", "!canary", &[(&[("canary", "")], false), (&[], true)]);
        check("gen>5", "gen>5", &[(&[("gen", "6")], true), (&[("gen", "5")], false), (&[("gen", "x")], false)]);
        check("gen<5", "gen<5", &[(&[("gen", "4")], true), (&[], false)]);
        check("a=", "a=", &[(&[("a", "")], true), (&[("a", "x")], false)]);
        check("x in ()", "x in ()", &[(&[("x", "")], true)]);
        check("in=notin", "in=notin", &[(&[("in", "notin")], true)]);
        check("example.com/app=v1.0_b", "example.com/app=v1.0_b", &[(&[("example.com/app", "v1.0_b")], true)]);
    }

    #[test]
    fn malformed_label_selectors_fail_with_kubernetes_messages() {
        let cases = [
            ("a=b,", "found '', expected: identifier after ','"),
            ("a=b c", "found 'c', expected: ',' or 'end of string'"),
            ("!a=b", "found '=', expected: ',' or 'end of string'"),
            ("a in b", "unable to parse requirement: found 'b' expected: '('"),
            ("a in (b", "unable to parse requirement: found '', expected: ',' or ')'"),
            ("a b", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
            ("a foo b", "unable to parse requirement: found 'foo', expected: in, notin, =, ==, !=, gt, lt"),
            ("=a", "found '=', expected: !, identifier, or 'end of string'"),
            ("a=(", "unable to parse requirement: found '(', expected: identifier"),
            (
                "a>b",
                "unable to parse requirement: values[0]: Invalid value: \"b\": for 'Gt', 'Lt' operators, the value must be an integer",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(LabelSelector::parse(input).unwrap_err(), want, "{input:?}");
        }
        let err = LabelSelector::parse("app=a b").unwrap_err();
        assert_eq!(err, "found 'b', expected: ',' or 'end of string'");
        let err = LabelSelector::parse("app=-x").unwrap_err();
        assert!(
            err.starts_with(
                "unable to parse requirement: values[0][app]: Invalid value: \"-x\": a valid label must be"
            ),
            "{err}"
        );
        let err = LabelSelector::parse("a/b/c").unwrap_err();
        assert!(
            err.starts_with("unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a qualified name"),
            "{err}"
        );
    }

    #[test]
    fn metav1_selectors_convert_with_match_labels_and_expressions() {
        let sel: metav1::LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["b", "a"]},
                {"key": "canary", "operator": "DoesNotExist"},
            ]
        }))
        .unwrap();
        let s = LabelSelector::from_metav1(&sel).unwrap();
        assert_eq!(s.to_string(), "app=web,!canary,tier in (a,b)".split(',').collect::<Vec<_>>().join(","));
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "a")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "a"), ("canary", "1")])));
        assert!(LabelSelector::from_metav1(&Default::default()).unwrap().matches(&labels(&[])));
        assert!(!LabelSelector::from_metav1_opt(None).unwrap().matches(&labels(&[])));
        let bad: metav1::LabelSelector = serde_json::from_value(serde_json::json!({
            "matchExpressions": [{"key": "a", "operator": "Foo"}]
        }))
        .unwrap();
        assert_eq!(LabelSelector::from_metav1(&bad).unwrap_err(), "\"Foo\" is not a valid label selector operator");
        let empty_in: metav1::LabelSelector =
            serde_json::from_value(serde_json::json!({"matchExpressions": [{"key": "a", "operator": "In"}]})).unwrap();
        assert!(LabelSelector::from_metav1(&empty_in).unwrap_err().contains("values set can't be empty"));
    }

    #[test]
    fn canonical_form_sorts_requirements_by_key() {
        let s = LabelSelector::parse("tier=b,app=a").unwrap();
        assert_eq!(s.to_string(), "app=a,tier=b");
    }

    fn field_check(selector: &str, canonical: &str, fields: &[(&str, &str)], want: bool) {
        let s = FieldSelector::parse(selector).unwrap_or_else(|e| panic!("{selector}: {e}"));
        assert_eq!(s.to_string(), canonical, "{selector:?}");
        let get = |f: &str| fields.iter().find(|(k, _)| *k == f).map(|(_, v)| v.to_string());
        assert_eq!(s.matches(get), want, "{selector:?} on {fields:?}");
    }

    #[test]
    fn field_selectors_parse_escape_and_match() {
        field_check("", "", &[], true);
        field_check("metadata.name=web", "metadata.name=web", &[("metadata.name", "web")], true);
        field_check("metadata.name==web", "metadata.name=web", &[("metadata.name", "x")], false);
        field_check("status.phase!=Running", "status.phase!=Running", &[("status.phase", "Pending")], true);
        field_check(
            "status.phase=Running,spec.nodeName=n1",
            "spec.nodeName=n1,status.phase=Running",
            &[("status.phase", "Running"), ("spec.nodeName", "n1")],
            true,
        );
        field_check("spec.nodeName=", "spec.nodeName=", &[], true);
        field_check(r"a=x\,y\=z\\", r"a=x\,y\=z\\", &[("a", r"x,y=z\")], true);
        let s = FieldSelector::parse("a!=b,c=d").unwrap();
        assert_eq!(s.requirements().len(), 2);
        assert_eq!(s.requires_exact_match("c"), Some("d"));
        assert_eq!(s.requires_exact_match("a"), None);
    }

    #[test]
    fn malformed_field_selectors_are_rejected() {
        let cases = [
            ("abc", "invalid selector: 'abc'; can't understand 'abc'"),
            (r"a=b\x", r"invalid field selector: invalid escape sequence: \x"),
            (r"a=b\", r"invalid field selector: invalid escape sequence: \"),
            ("a=b=c", "invalid field selector: unescaped character in value: ="),
        ];
        for (input, want) in cases {
            assert_eq!(FieldSelector::parse(input).unwrap_err(), want, "{input:?}");
        }
    }
}
