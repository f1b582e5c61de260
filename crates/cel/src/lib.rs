//! Kubernetes' CEL environment (k8s.io/apiserver `pkg/cel`): the expressions of CRD validation
//! rules (`x-kubernetes-validations`), ValidatingAdmissionPolicies and admission webhook
//! `matchConditions` (<https://kubernetes.io/docs/reference/using-api/cel/>).
//!
//! - [`compile`]: parses an expression in the Kubernetes environment — the CEL standard
//!   library, the strings and lists extensions, optionals, and Kubernetes' own libraries in
//!   [`library`] (lists, regex, URLs, quantities, IPs and CIDRs, sets) — and checks that it
//!   names only declared variables and known functions (cel-rust has no type checker, so that
//!   is the compile-time check skiff can make);
//! - [`Compiled::eval`]: evaluates against an [`Activation`] of JSON values (converted with
//!   [`to_val`], strings borrowed, not copied), after the runtime cost guard of [`cost`];
//! - errors print as cel-go prints them (`ERROR: <input>:1:5: ...`, `no such key: x`).
//!
//! The interpreter is cel-rust's `cel` crate (the maintained Rust CEL implementation); what it
//! lacks of Kubernetes' libraries is written here.

pub mod cost;
pub mod library;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::common::types::{CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt};
use cel::common::value::Val;
use cel::{Context, Env, ExecutionError, Program};

/// The shared Kubernetes environment: built once, read by every compile and evaluation.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    // Each registration is of names the standard library does not declare; a failure would be
    // a programming error caught by this crate's tests, so it is logged rather than fatal.
    let results = [
        env.add_extension(cel::extensions::strings),
        env.add_extension(cel::extensions::lists),
        env.add_extension(library::install),
    ];
    for r in results {
        if let Err(e) = r {
            eprintln!("skiff-cel: registering a CEL library: {e:?}");
        }
    }
    Arc::new(env)
});

/// The Kubernetes CEL environment (shared).
pub fn env() -> &'static Arc<Env> {
    &ENV
}

/// A compiled expression.
pub struct Compiled {
    program: Program,
    source: String,
    /// Nesting depth of comprehensions (macros such as `all`, `map`), for the cost bound.
    comprehension_depth: u32,
    /// Number of AST nodes, for the cost bound.
    nodes: u64,
    /// The variables the expression reads.
    free: Vec<String>,
}

impl std::fmt::Debug for Compiled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compiled").field("source", &self.source).finish()
    }
}

/// Why an expression did not compile: cel-go's wording (`ERROR: <input>:1:3: ...`, or
/// `undeclared reference to 'x' (in container '')`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileError(pub String);

impl std::fmt::Display for CompileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CompileError {}

/// Why an evaluation failed.
#[derive(Debug, Clone, PartialEq)]
pub enum EvalError {
    /// The expression failed at run time (`no such key: x`, a division by zero, no matching
    /// overload...): the message as cel-go words it where it can.
    Runtime(String),
    /// The cost bound of the evaluation exceeded the limit (cel-go's `operation cancelled:
    /// actual cost limit exceeded`); the bound is the first number.
    CostLimit(u64, u64),
}

impl std::fmt::Display for EvalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Runtime(m) => f.write_str(m),
            Self::CostLimit(..) => f.write_str("operation cancelled: actual cost limit exceeded"),
        }
    }
}

impl std::error::Error for EvalError {}

/// Compiles `source`, allowing only the variables in `vars`.
///
/// # Errors
/// A syntax error, or a reference to an undeclared variable or unknown function, worded as
/// cel-go does.
pub fn compile(source: &str, vars: &[&str]) -> Result<Compiled, CompileError> {
    let program = ENV.compile(source).map_err(|e| CompileError(e.to_string()))?;
    let free = cost::free_variables(program.expression());
    for v in &free {
        let v = v.as_str();
        // Qualified names reach here as their first segment; a type name (int, string...) or a
        // namespace of functions (`lists`, `strings`) is not a variable.
        if !vars.contains(&v) && !is_builtin_identifier(v) {
            return Err(CompileError(format!("ERROR: <input>:1:1: undeclared reference to '{v}' (in container '')")));
        }
    }
    let (depth, nodes) = cost::shape(program.expression());
    Ok(Compiled { program, source: source.to_string(), comprehension_depth: depth, nodes, free })
}

/// A compile result shared by every user of the same expression.
pub type Shared = Arc<Result<Compiled, CompileError>>;

/// Compiled expressions by (variables, source): admission compiles the expressions of its
/// configurations once and every request reuses them. Bounded (cleared past 4096 entries), so
/// configurations that churn cannot grow it forever.
static CACHE: LazyLock<std::sync::Mutex<HashMap<(String, String), Shared>>> = LazyLock::new(Default::default);

/// [`compile`], cached by `(vars, source)`.
pub fn compile_cached(source: &str, vars: &[&str]) -> Shared {
    let key = (vars.join(","), source.to_string());
    let mut cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = cache.get(&key) {
        return c.clone();
    }
    let c = Arc::new(compile(source, vars));
    if cache.len() >= 4096 {
        cache.clear();
    }
    cache.insert(key, c.clone());
    c
}

fn is_builtin_identifier(name: &str) -> bool {
    matches!(
        name,
        "int"
            | "uint"
            | "double"
            | "bool"
            | "string"
            | "bytes"
            | "list"
            | "map"
            | "null_type"
            | "type"
            | "dyn"
            | "duration"
            | "timestamp"
            | "optional"
            | "lists"
            | "strings"
            | "math"
            | "sets"
            | "base64"
            | "ip"
    ) || name.starts_with('@')
}

impl Compiled {
    /// The expression's source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the expression reads `var` (e.g. `oldSelf`, which makes a CRD rule a transition
    /// rule).
    pub fn uses(&self, var: &str) -> bool {
        self.free.iter().any(|v| v == var)
    }

    /// Evaluates the expression. `limit` bounds its cost ([`cost::PER_CALL_LIMIT`] for CRD
    /// rules and policies); the bound is computed from the expression's shape and the sizes of
    /// the activation's values before anything runs, so a pathological expression is refused
    /// instead of evaluated.
    ///
    /// # Errors
    /// [`EvalError::CostLimit`] over the limit, [`EvalError::Runtime`] when evaluation fails.
    pub fn eval(&self, activation: &Activation<'_>, limit: u64) -> Result<cel::Value, EvalError> {
        let bound = self.cost_bound(activation);
        if bound > limit {
            return Err(EvalError::CostLimit(bound, limit));
        }
        // The activation lends its values to the evaluation: nothing is copied per evaluation.
        let mut ctx = Context::with_env(ENV.clone());
        ctx.set_variable_resolver(activation);
        self.program.execute(&ctx).map_err(|e| EvalError::Runtime(runtime_message(&e)))
    }

    /// Evaluates to a boolean: anything else is a runtime error (`expected bool`), as a
    /// validation expression must be.
    ///
    /// # Errors
    /// As [`Compiled::eval`], and a non-boolean result.
    pub fn eval_bool(&self, activation: &Activation<'_>, limit: u64) -> Result<bool, EvalError> {
        match self.eval(activation, limit)? {
            cel::Value::Bool(b) => Ok(b),
            other => Err(EvalError::Runtime(format!("expected boolean result, got {}", other.type_of()))),
        }
    }

    /// Evaluates to a string (a `messageExpression`).
    ///
    /// # Errors
    /// As [`Compiled::eval`], and a non-string result.
    pub fn eval_string(&self, activation: &Activation<'_>, limit: u64) -> Result<String, EvalError> {
        match self.eval(activation, limit)? {
            cel::Value::String(s) => Ok(s.to_string()),
            other => Err(EvalError::Runtime(format!("expected string result, got {}", other.type_of()))),
        }
    }

    /// The static cost estimate, given the largest list or map the expression can meet
    /// (`maxItems`/`maxProperties` of the schema, or an assumed size where none is declared).
    pub fn static_cost(&self, largest: u64) -> u64 {
        cost::bound(self.comprehension_depth, self.nodes, largest)
    }

    /// The cost bound of evaluating against `activation` (see [`cost`]).
    pub fn cost_bound(&self, activation: &Activation<'_>) -> u64 {
        cost::bound(self.comprehension_depth, self.nodes, activation.max_collection)
    }
}

/// cel-go's wording of a runtime error, where cel-rust's differs.
fn runtime_message(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::DivisionByZero(_) => "division by zero".into(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".into(),
        ExecutionError::Overflow(..) => "integer overflow".into(),
        ExecutionError::IndexOutOfBounds(i) => format!("index out of bounds: {}", value_text(i)),
        ExecutionError::NoSuchOverload(o) => format!("no such overload: {}", o.function()),
        ExecutionError::FunctionError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

fn value_text(v: &cel::Value) -> String {
    match v {
        cel::Value::Int(i) => i.to_string(),
        cel::Value::UInt(u) => u.to_string(),
        cel::Value::String(s) => s.to_string(),
        other => format!("{other:?}"),
    }
}

/// The variables an expression is evaluated with, each a JSON value (or an absent optional)
/// converted to CEL.
pub struct Activation<'v> {
    vars: Vec<(&'static str, Box<dyn Val + 'v>)>,
    /// The longest list, map or string among the values: what the cost bound multiplies.
    max_collection: u64,
}

impl cel::context::VariableResolver for Activation<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<cel::common::value::CowVal<'b, 'b>> {
        let (_, v) = self.vars.iter().find(|(n, _)| *n == variable)?;
        let v: &'b (dyn Val + 'b) = v.as_ref();
        Some(cel::common::value::CowVal::from(v))
    }
}

impl Default for Activation<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'v> Activation<'v> {
    /// An empty activation.
    pub fn new() -> Self {
        Self { vars: Vec::new(), max_collection: 0 }
    }

    /// Binds `name` to a JSON value (strings are borrowed, not copied).
    pub fn bind(&mut self, name: &'static str, value: &'v serde_json::Value) -> &mut Self {
        self.max_collection = self.max_collection.max(cost::largest_collection(value));
        self.vars.push((name, to_val(value)));
        self
    }

    /// Binds `name` to a CEL value built by the caller (e.g. an optional, or a map of
    /// evaluated variables).
    pub fn bind_val(&mut self, name: &'static str, value: Box<dyn Val + 'v>, size: u64) -> &mut Self {
        self.max_collection = self.max_collection.max(size);
        self.vars.push((name, value));
        self
    }

    /// Binds `name` to `optional.of(value)`, or `optional.none()` (CRD rules' `oldSelf` with
    /// `optionalOldSelf`).
    pub fn bind_optional(&mut self, name: &'static str, value: Option<&'v serde_json::Value>) -> &mut Self {
        let opt = match value {
            Some(v) => {
                self.max_collection = self.max_collection.max(cost::largest_collection(v));
                cel::common::types::CelOptional::of(to_val(v))
            }
            None => cel::common::types::CelOptional::none(),
        };
        self.vars.push((name, Box::new(opt)));
        self
    }
}

/// A JSON value as a CEL value: objects are maps with string keys, arrays lists, integers
/// `int` (or `uint` past `int`'s range), other numbers `double`.
pub fn to_val<'v>(v: &'v serde_json::Value) -> Box<dyn Val + 'v> {
    use serde_json::Value as J;
    match v {
        J::Null => Box::new(CelNull),
        J::Bool(b) => Box::new(CelBool::from(*b)),
        J::Number(n) => {
            if let Some(i) = n.as_i64() {
                Box::new(CelInt::from(i))
            } else if let Some(u) = n.as_u64() {
                Box::new(CelUInt::from(u))
            } else {
                Box::new(CelDouble::from(n.as_f64().unwrap_or(0.0)))
            }
        }
        J::String(s) => Box::new(CelString::from(s.as_str())),
        J::Array(a) => Box::new(CelList::from(a.iter().map(to_val).collect::<Vec<_>>())),
        J::Object(m) => {
            let map: HashMap<CelMapKey<'v>, Box<dyn Val + 'v>> =
                m.iter().map(|(k, v)| (CelMapKey::from(k.as_str()), to_val(v))).collect();
            Box::new(CelMap::from(map))
        }
    }
}

/// A CEL value as JSON (for variables' values shown in messages, and tests). Values with no
/// JSON form (types, opaque library values) become their string form.
pub fn to_json(v: &cel::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        cel::Value::Null => J::Null,
        cel::Value::Bool(b) => J::Bool(*b),
        cel::Value::Int(i) => J::from(*i),
        cel::Value::UInt(u) => J::from(*u),
        cel::Value::Float(f) => serde_json::Number::from_f64(*f).map(J::Number).unwrap_or(J::Null),
        cel::Value::String(s) => J::String(s.to_string()),
        cel::Value::List(l) => J::Array(l.iter().map(to_json).collect()),
        cel::Value::Map(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m.map.iter() {
                let key = match k {
                    cel::objects::Key::String(s) => s.to_string(),
                    cel::objects::Key::Int(i) => i.to_string(),
                    cel::objects::Key::Uint(u) => u.to_string(),
                    cel::objects::Key::Bool(b) => b.to_string(),
                };
                out.insert(key, to_json(v));
            }
            J::Object(out)
        }
        other => J::String(format!("{other:?}")),
    }
}

#[cfg(test)]
mod tests;
