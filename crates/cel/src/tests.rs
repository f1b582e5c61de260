//! Cases from Kubernetes' library tests (k8s.io/apiserver `pkg/cel/library/*_test.go`) and
//! cel-go's behaviour, as facts: each expression must evaluate to `true`, or fail with the
//! message shown.

use serde_json::json;

use super::*;

fn eval(expr: &str) -> Result<cel::Value, String> {
    let c = compile(expr, &["self"]).map_err(|e| e.0)?;
    let obj = json!({"a": 1, "list": [1, 2, 3], "name": "web"});
    let mut act = Activation::new();
    act.bind("self", &obj);
    c.eval(&act, cost::PER_CALL_LIMIT).map_err(|e| e.to_string())
}

fn holds(cases: &[&str]) {
    for expr in cases {
        assert_eq!(eval(expr), Ok(cel::Value::Bool(true)), "{expr}");
    }
}

#[test]
fn kubernetes_list_functions_follow_the_upstream_table() {
    holds(&[
        "[1, 2, 3].isSorted()",
        "![3, 1, 2].isSorted()",
        "['a', 'b', 'c'].isSorted()",
        "[1, 2, 3].sum() == 6",
        "[1.0, 2.5].sum() == 3.5",
        "[].sum() == 0",
        "[3, 1, 2].min() == 1",
        "[3, 1, 2].max() == 3",
        "[1, 2, 2, 3].indexOf(2) == 1",
        "[1, 2, 2, 3].lastIndexOf(2) == 2",
        "[1, 2].indexOf(5) == -1",
        "self.list.sum() == 6",
    ]);
    assert!(eval("[].min()").unwrap_err().contains("min called on empty list"));
}

#[test]
fn regex_find_and_find_all_return_matches() {
    holds(&[
        "'abc 123'.find('[0-9]+') == '123'",
        "'abc'.find('[0-9]+') == ''",
        "'123 abc 456'.findAll('[0-9]+') == ['123', '456']",
        "'123 abc 456'.findAll('[0-9]+', 1) == ['123']",
        "'abc'.matches('^[a-z]+$')",
    ]);
}

#[test]
fn urls_are_taken_apart_as_go_parses_them() {
    holds(&[
        "url('https://example.com:80/').getHost() == 'example.com:80'",
        "url('https://example.com/path').getScheme() == 'https'",
        "url('https://example.com/path').getHostname() == 'example.com'",
        "url('https://example.com/path').getPort() == ''",
        "url('https://example.com:8443/path').getPort() == '8443'",
        "url('https://example.com/path%20x').getEscapedPath() == '/path%20x'",
        "url('https://example.com').getEscapedPath() == ''",
        "url('https://[::1]:80/').getHostname() == '::1'",
        "url('https://[::1]:80/').getHost() == '[::1]:80'",
        "url('https://example.com/?k=a&k=b&j=c').getQuery() == {'k': ['a', 'b'], 'j': ['c']}",
        "url('/absolute-path').getScheme() == ''",
        "url('/absolute-path').getEscapedPath() == '/absolute-path'",
        "isURL('https://example.com')",
        "!isURL('-')",
        "!isURL('example.com')",
    ]);
}

#[test]
fn quantities_compare_and_convert_as_resource_quantity() {
    holds(&[
        "isQuantity('50Mi')",
        "!isQuantity('50x')",
        "quantity('50k').asInteger() == 50000",
        "quantity('50k').isInteger()",
        "!quantity('50m').isInteger()",
        "quantity('50m').sign() == 1",
        "quantity('-1').sign() == -1",
        "quantity('0').sign() == 0",
        "quantity('50M').isGreaterThan(quantity('50k'))",
        "quantity('50k').isLessThan(quantity('50M'))",
        "quantity('1Ki').compareTo(quantity('1024')) == 0",
        "quantity('50k').add(20) == quantity('50020')",
        "quantity('50k').add(quantity('20')) == quantity('50020')",
        "quantity('50k').sub(quantity('20k')) == quantity('30k')",
        "quantity('50k').sub(20000).asInteger() == 30000",
        "quantity('1.5').asApproximateFloat() == 1.5",
    ]);
    assert!(eval("quantity('50m').asInteger()").unwrap_err().contains("cannot convert value to integer"));
}

#[test]
fn ips_and_cidrs_follow_the_upstream_table() {
    holds(&[
        "ip('192.168.0.1').family() == 4",
        "ip('2001:db8::1').family() == 6",
        "isIP('1.2.3.4')",
        "!isIP('::ffff:1.2.3.4')",
        "!isIP('fe80::1%eth0')",
        "!isIP('1.2.3')",
        "ip.isCanonical('2001:db8::1')",
        "!ip.isCanonical('2001:DB8::1')",
        "!ip.isCanonical('2001:db8::0:1')",
        "ip('127.0.0.1').isLoopback()",
        "ip('0.0.0.0').isUnspecified()",
        "ip('224.0.0.1').isLinkLocalMulticast()",
        "ip('169.254.1.1').isLinkLocalUnicast()",
        "ip('fe80::1').isLinkLocalUnicast()",
        "ip('192.168.0.1').isGlobalUnicast()",
        "!ip('255.255.255.255').isGlobalUnicast()",
        "string(ip('::1')) == '::1'",
        "ip('::1') == ip('::1')",
        "isCIDR('192.168.0.0/24')",
        "!isCIDR('192.168.0.0/33')",
        "!isCIDR('192.168.0.0')",
        "cidr('192.168.0.0/24').containsIP('192.168.0.1')",
        "!cidr('192.168.0.0/24').containsIP('192.168.1.1')",
        "cidr('192.168.0.0/24').containsIP(ip('192.168.0.1'))",
        "!cidr('192.168.0.0/24').containsIP(ip('::1'))",
        "cidr('192.168.0.0/16').containsCIDR('192.168.10.0/24')",
        "!cidr('192.168.10.0/24').containsCIDR('192.168.0.0/16')",
        "cidr('192.168.0.0/16').containsCIDR(cidr('192.168.0.0/16'))",
        "cidr('192.168.0.1/24').masked() == cidr('192.168.0.0/24')",
        "cidr('192.168.0.1/24').ip() == ip('192.168.0.1')",
        "cidr('192.168.0.1/24').prefixLength() == 24",
        "string(cidr('::1/128')) == '::1/128'",
    ]);
}

#[test]
fn strings_sets_and_optionals_are_available() {
    holds(&[
        "'Hello'.lowerAscii() == 'hello'",
        "'a,b'.split(',') == ['a', 'b']",
        "['a', 'b'].join('-') == 'a-b'",
        "'abc'.indexOf('c') == 2",
        "sets.contains([1, 2, 3], [2])",
        "sets.equivalent([1, 2], [2, 1, 1])",
        "sets.intersects([1, 2], [2, 5])",
        "!sets.intersects([1], [5])",
        "self.?missing.orValue(5) == 5",
        "self.?a.orValue(5) == 1",
        "optional.none().hasValue() == false",
        "has(self.name) && !has(self.missing)",
        "self.list.all(x, x > 0) && self.list.exists_one(x, x == 2)",
    ]);
}

#[test]
fn runtime_errors_are_worded_as_cel_go_words_them() {
    assert_eq!(eval("self.missing == 1").unwrap_err(), "no such key: missing");
    assert_eq!(eval("1 / 0 == 1").unwrap_err(), "division by zero");
}

#[test]
fn syntax_errors_and_undeclared_names_fail_compilation() {
    let e = compile("self.a ==", &["self"]).unwrap_err();
    assert!(e.0.starts_with("ERROR: <input>:1:"), "{e}");
    let e = compile("other.a == 1", &["self"]).unwrap_err();
    assert!(e.0.contains("undeclared reference to 'other'"), "{e}");
    assert!(compile("oldSelf == self", &["self", "oldSelf"]).unwrap().uses("oldSelf"));
    assert!(!compile("self.a == 1", &["self", "oldSelf"]).unwrap().uses("oldSelf"));
}

#[test]
fn an_expression_over_its_cost_limit_is_refused_before_it_runs() {
    let big: Vec<i64> = (0..2000).collect();
    let obj = json!({"items": big});
    let c = compile("self.items.all(x, self.items.all(y, x + y >= 0))", &["self"]).unwrap();
    let mut act = Activation::new();
    act.bind("self", &obj);
    let e = c.eval(&act, cost::PER_CALL_LIMIT).unwrap_err();
    assert!(matches!(e, EvalError::CostLimit(..)), "{e:?}");
    assert_eq!(e.to_string(), "operation cancelled: actual cost limit exceeded");
    let c = compile("self.items.all(x, x >= 0)", &["self"]).unwrap();
    assert_eq!(c.eval_bool(&act, cost::PER_CALL_LIMIT), Ok(true));
}

#[test]
fn a_non_boolean_result_is_an_error_for_a_validation() {
    let c = compile("self.a", &["self"]).unwrap();
    let obj = json!({"a": 1});
    let mut act = Activation::new();
    act.bind("self", &obj);
    assert!(c.eval_bool(&act, cost::PER_CALL_LIMIT).is_err());
}
