//! Compose's variable interpolation (`$NAME`, `${NAME:-default}`, ...), with an explicit
//! variable list standing in for the shell environment and `.env` file.

use std::collections::BTreeSet;

use serde_yaml::Value;

/// Expands Compose's `$$`, `$NAME`, `${NAME}`, `${NAME:-default}`, `${NAME-default}`,
/// `${NAME:?err}` and `${NAME?err}` in `input`, with `vars` (name, value) as the whole
/// environment, and records in `used` the name of every variable referenced (also those that
/// fall back to a default).
///
/// # Errors
///
/// Whatever Compose would reject (an unclosed `${`, an invalid name, an unsupported operator,
/// a bare `$`, a required variable that is unset) and an unset variable without a default
/// (which Compose turns into an empty string with only a warning). The message quotes `input`.
pub fn interpolate(input: &str, vars: &[(&str, &str)], used: &mut BTreeSet<String>) -> Result<String, String> {
    let lookup = |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
    let is_name_start = |c: char| c.is_ascii_alphabetic() || c == '_';
    let name_len = |s: &str| {
        s.char_indices()
            .find(|&(i, c)| !(c.is_ascii_alphanumeric() || c == '_') || (i == 0 && !is_name_start(c)))
            .map_or(s.len(), |(i, _)| i)
    };
    let mut out = String::new();
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(r) = after.strip_prefix('$') {
            out.push('$');
            rest = r;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body.find('}').ok_or_else(|| format!("unclosed `${{` in {input:?}"))?;
            let (expr, r) = (&body[..end], &body[end + 1..]);
            let n = name_len(expr);
            if n == 0 {
                return Err(format!("invalid interpolation `${{{expr}}}` in {input:?}"));
            }
            let (name, op) = expr.split_at(n);
            used.insert(name.to_owned());
            let value = lookup(name);
            let expanded = if op.is_empty() {
                value
                    .map(str::to_owned)
                    .ok_or_else(|| format!("`${{{name}}}` has no default and is unset in {input:?}"))?
            } else if let Some(default) = op.strip_prefix(":-") {
                value.filter(|v| !v.is_empty()).unwrap_or(default).to_owned()
            } else if let Some(default) = op.strip_prefix('-') {
                value.unwrap_or(default).to_owned()
            } else if op.starts_with(":?") || op.starts_with('?') {
                value.map(str::to_owned).ok_or_else(|| format!("`${{{expr}}}` is required and unset in {input:?}"))?
            } else {
                return Err(format!("unsupported interpolation `${{{expr}}}` in {input:?}"));
            };
            out.push_str(&expanded);
            rest = r;
        } else {
            let n = name_len(after);
            if n == 0 {
                return Err(format!("a bare `$` in {input:?} (write `$$` for a literal dollar sign)"));
            }
            let name = &after[..n];
            used.insert(name.to_owned());
            out.push_str(lookup(name).ok_or_else(|| format!("`${name}` has no default and is unset in {input:?}"))?);
            rest = &after[n..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// [`interpolate`] without recording the variables used.
///
/// # Errors
///
/// As [`interpolate`].
pub fn expand(input: &str, vars: &[(&str, &str)]) -> Result<String, String> {
    interpolate(input, vars, &mut BTreeSet::new())
}

/// Runs [`interpolate`] on every string value in `v` (mapping values and sequence items, at
/// any depth; mapping keys are left alone), recording the variables used in
/// `used` and each error in `errors`.
pub fn interpolate_all(v: &Value, vars: &[(&str, &str)], used: &mut BTreeSet<String>, errors: &mut Vec<String>) {
    match v {
        Value::String(s) => {
            if let Err(e) = interpolate(s, vars, used) {
                errors.push(e);
            }
        }
        Value::Mapping(m) => m.values().for_each(|v| interpolate_all(v, vars, used, errors)),
        Value::Sequence(s) => s.iter().for_each(|v| interpolate_all(v, vars, used, errors)),
        _ => {}
    }
}
