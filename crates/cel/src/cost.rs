//! Cost limits (k8s.io/apiserver `pkg/apis/cel` config: `PerCallLimit`,
//! `RuntimeCELCostBudget`).
//!
//! cel-go counts the cost of every step as it evaluates and cancels an evaluation past the
//! limit. cel-rust's interpreter has no such counter, so skiff bounds the cost *before*
//! evaluating: an expression of `n` AST nodes whose comprehensions nest `d` deep, over values
//! whose longest list or map has `l` elements, takes at most about `n · l^d` steps (each
//! comprehension iterates at most `l` times — a comprehension over a list the expression builds
//! itself, such as `map`'s result, is no longer than its input). A bound over the limit refuses
//! the evaluation with cel-go's error, so a pathological rule (nested comprehensions over big
//! lists) cannot hold a request thread. The bound over-estimates: a rule that Kubernetes would
//! just let through may be refused when its lists are huge and its comprehensions nested.

use cel::common::ast::{EntryExpr, Expr, IdedExpr};

/// cel-go's per-evaluation cost limit for CRD rules, policies and match conditions
/// (`PerCallLimit`).
pub const PER_CALL_LIMIT: u64 = 1_000_000;

/// The cost budget of all the rules of one custom resource write (`RuntimeCELCostBudget`).
pub const RUNTIME_CEL_COST_BUDGET: u64 = 10_000_000;

/// The cost a CRD rule may be estimated at, statically, at CRD create
/// (`StaticEstimatedCostLimit`).
pub const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;

/// (comprehension nesting depth, node count) of an expression.
pub fn shape(e: &IdedExpr) -> (u32, u64) {
    let mut nodes = 0;
    let depth = walk(e, &mut nodes);
    (depth, nodes)
}

fn walk(e: &IdedExpr, nodes: &mut u64) -> u32 {
    *nodes += 1;
    match &e.expr {
        Expr::Call(c) => {
            let mut d = c.target.as_deref().map(|t| walk(t, nodes)).unwrap_or(0);
            for a in &c.args {
                d = d.max(walk(a, nodes));
            }
            d
        }
        Expr::Comprehension(c) => {
            let range = walk(&c.iter_range, nodes);
            let body = [&c.accu_init, &c.loop_cond, &c.loop_step, &c.result]
                .into_iter()
                .map(|x| walk(x, nodes))
                .max()
                .unwrap_or(0);
            range.max(body + 1)
        }
        Expr::List(l) => l.elements.iter().map(|x| walk(x, nodes)).max().unwrap_or(0),
        Expr::Map(m) => entries(&m.entries, nodes),
        Expr::Struct(s) => entries(&s.entries, nodes),
        Expr::Select(s) => walk(&s.operand, nodes),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => 0,
    }
}

fn entries(es: &[cel::common::ast::IdedEntryExpr], nodes: &mut u64) -> u32 {
    let mut d = 0;
    for e in es {
        match &e.expr {
            EntryExpr::MapEntry(m) => {
                d = d.max(walk(&m.key, nodes)).max(walk(&m.value, nodes));
            }
            EntryExpr::StructField(f) => d = d.max(walk(&f.value, nodes)),
        }
    }
    d
}

/// The identifiers an expression reads that no comprehension of its own binds (its free
/// variables), in order of appearance.
pub fn free_variables(e: &IdedExpr) -> Vec<String> {
    let mut out = Vec::new();
    let mut bound = Vec::new();
    free(e, &mut bound, &mut out);
    out
}

fn free(e: &IdedExpr, bound: &mut Vec<String>, out: &mut Vec<String>) {
    match &e.expr {
        Expr::Ident(name) => {
            if !bound.iter().any(|b| b == name) && !out.contains(name) {
                out.push(name.clone());
            }
        }
        Expr::Call(c) => {
            if let Some(t) = c.target.as_deref() {
                free(t, bound, out);
            }
            for a in &c.args {
                free(a, bound, out);
            }
        }
        Expr::Comprehension(c) => {
            free(&c.iter_range, bound, out);
            free(&c.accu_init, bound, out);
            let n = bound.len();
            bound.push(c.iter_var.clone());
            if let Some(v) = &c.iter_var2 {
                bound.push(v.clone());
            }
            bound.push(c.accu_var.clone());
            for x in [&c.loop_cond, &c.loop_step, &c.result] {
                free(x, bound, out);
            }
            bound.truncate(n);
        }
        Expr::List(l) => l.elements.iter().for_each(|x| free(x, bound, out)),
        Expr::Map(m) => free_entries(&m.entries, bound, out),
        Expr::Struct(s) => free_entries(&s.entries, bound, out),
        Expr::Select(s) => free(&s.operand, bound, out),
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn free_entries(es: &[cel::common::ast::IdedEntryExpr], bound: &mut Vec<String>, out: &mut Vec<String>) {
    for e in es {
        match &e.expr {
            EntryExpr::MapEntry(m) => {
                free(&m.key, bound, out);
                free(&m.value, bound, out);
            }
            EntryExpr::StructField(f) => free(&f.value, bound, out),
        }
    }
}

/// The cost bound `nodes · max(largest, 1)^depth`, saturating.
pub fn bound(depth: u32, nodes: u64, largest: u64) -> u64 {
    let l = largest.max(1);
    let mut b = nodes.max(1);
    for _ in 0..depth {
        b = b.saturating_mul(l);
    }
    b
}

/// The length of the longest array or object anywhere in `v`.
pub fn largest_collection(v: &serde_json::Value) -> u64 {
    match v {
        serde_json::Value::Array(a) => a.iter().map(largest_collection).fold(a.len() as u64, u64::max),
        serde_json::Value::Object(m) => m.values().map(largest_collection).fold(m.len() as u64, u64::max),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_comprehensions_multiply_the_bound_by_each_level() {
        let p = crate::env().compile("self.all(x, self.all(y, x == y))").unwrap();
        let (depth, nodes) = shape(p.expression());
        assert_eq!(depth, 2);
        assert!(bound(depth, nodes, 1000) >= 1_000_000 * nodes);
        assert_eq!(bound(0, 5, 1_000_000), 5, "no comprehension: the sizes do not matter");
    }

    #[test]
    fn the_largest_collection_is_found_at_any_depth() {
        let v = serde_json::json!({"a": {"b": [1, 2, 3, 4]}, "c": [1]});
        assert_eq!(largest_collection(&v), 4);
    }
}
