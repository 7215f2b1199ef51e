//! The Kafka topics a topic-init shell script creates with `rpk topic create`.

use std::collections::BTreeMap;

/// How a topic is created.
#[derive(Default)]
pub struct TopicSpec {
    /// `-p`/`--partitions`, if given.
    pub partitions: Option<i64>,
    /// `-c`/`--topic-config key=value` pairs.
    pub configs: BTreeMap<String, String>,
}

/// The topics the `rpk topic create` commands in the (already interpolated) shell `script`
/// create, by name.
///
/// The script is split into statements at `&&`, `||`, `;`, `|`, braces and parentheses, and
/// words are unquoted; dry runs (`-d`/`--dry`) create nothing. A topic created twice keeps the
/// later spec.
///
/// # Errors
///
/// A flag this parser does not know (so a new option can not silently change what is
/// created), a flag without its value, a partition count that is not a number, or a topic
/// config that is not `key=value`.
pub fn created_topics(script: &str) -> Result<BTreeMap<String, TopicSpec>, String> {
    let mut statements = script.to_owned();
    for separator in ["&&", "||", ";", "|", "{", "}", "(", ")"] {
        statements = statements.replace(separator, "\n");
    }
    let mut topics = BTreeMap::new();
    for statement in statements.lines() {
        let tokens: Vec<String> =
            statement.split_whitespace().map(|t| t.trim_matches(|c| c == '"' || c == '\'').to_owned()).collect();
        let Some(start) = tokens.windows(3).position(|w| w[0] == "rpk" && w[1] == "topic" && w[2] == "create") else {
            continue;
        };
        let mut names = Vec::new();
        let mut spec = TopicSpec::default();
        let mut dry = false;
        let mut args = tokens[start + 3..].iter();
        while let Some(token) = args.next() {
            if !token.starts_with('-') {
                names.push(token.clone());
                continue;
            }
            let (flag, inline) = match token.split_once('=') {
                Some((f, v)) => (f, Some(v.to_owned())),
                None => (token.as_str(), None),
            };
            match flag {
                "--if-not-exists" => continue,
                "-d" | "--dry" => {
                    dry = true;
                    continue;
                }
                "-p" | "--partitions" | "-r" | "--replicas" | "-c" | "--topic-config" | "-X" => {}
                other => return Err(format!("unknown `rpk topic create` flag {other} (teach this test)")),
            }
            let value = inline.or_else(|| args.next().cloned()).ok_or_else(|| format!("{flag} without a value"))?;
            match flag {
                "-p" | "--partitions" => {
                    spec.partitions =
                        Some(value.parse().map_err(|_| format!("partition count `{value}` is not a number"))?);
                }
                "-c" | "--topic-config" => {
                    let (k, v) =
                        value.split_once('=').ok_or_else(|| format!("topic config `{value}` is not key=value"))?;
                    spec.configs.insert(k.to_owned(), v.to_owned());
                }
                _ => {}
            }
        }
        if dry {
            continue;
        }
        for name in names {
            topics.insert(name, TopicSpec { partitions: spec.partitions, configs: spec.configs.clone() });
        }
    }
    Ok(topics)
}
