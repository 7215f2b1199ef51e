//! What a topic-init shell script does to the Kafka cluster: the topics it creates with
//! `rpk topic create` and the cluster properties it sets with `rpk cluster config set`.

use std::collections::BTreeMap;

/// How a topic is created.
#[derive(Default, Clone)]
pub struct TopicSpec {
    /// `-p`/`--partitions`, if given.
    pub partitions: Option<i64>,
    /// `-r`/`--replicas`, if given (without it the cluster's `default_topic_replications`
    /// applies).
    pub replicas: Option<i64>,
    /// `-c`/`--topic-config key=value` pairs.
    pub configs: BTreeMap<String, String>,
}

/// The statements of the (already interpolated) shell `script` as unquoted words: the script
/// split at `&&`, `||`, `;`, `|`, braces, parentheses and line ends.
fn statements(script: &str) -> Vec<Vec<String>> {
    let mut text = script.to_owned();
    for separator in ["&&", "||", ";", "|", "{", "}", "(", ")"] {
        text = text.replace(separator, "\n");
    }
    text.lines()
        .map(|statement| {
            statement.split_whitespace().map(|t| t.trim_matches(|c| c == '"' || c == '\'').to_owned()).collect()
        })
        .collect()
}

/// The words after the first `rpk <words...>` in `tokens` (`None` when there is none).
fn after<'a>(tokens: &'a [String], command: &[&str]) -> Option<&'a [String]> {
    let n = command.len() + 1;
    let start = tokens.windows(n).position(|w| w[0] == "rpk" && w[1..].iter().zip(command).all(|(a, b)| a == b))?;
    Some(&tokens[start + n..])
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
/// created), a flag without its value, a partition or replica count that is not a number, or a
/// topic config that is not `key=value`.
pub fn created_topics(script: &str) -> Result<BTreeMap<String, TopicSpec>, String> {
    let mut topics = BTreeMap::new();
    for tokens in statements(script) {
        let Some(rest) = after(&tokens, &["topic", "create"]) else {
            continue;
        };
        let mut names = Vec::new();
        let mut spec = TopicSpec::default();
        let mut dry = false;
        let mut args = rest.iter();
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
            let number = |what: &str| value.parse::<i64>().map_err(|_| format!("{what} `{value}` is not a number"));
            match flag {
                "-p" | "--partitions" => spec.partitions = Some(number("partition count")?),
                "-r" | "--replicas" => spec.replicas = Some(number("replica count")?),
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
            topics.insert(name, spec.clone());
        }
    }
    Ok(topics)
}

/// The cluster properties the `rpk cluster config set <key> <value>` commands in the (already
/// interpolated) shell `script` set, by name; a property set twice keeps the later value.
///
/// # Errors
///
/// A `set` without both a key and a value, or with a flag (so an option can not silently change
/// what is set).
pub fn cluster_config(script: &str) -> Result<BTreeMap<String, String>, String> {
    let mut set = BTreeMap::new();
    for tokens in statements(script) {
        let Some(rest) = after(&tokens, &["cluster", "config", "set"]) else {
            continue;
        };
        match rest {
            [key, value] if !key.starts_with('-') && !value.starts_with('-') => {
                set.insert(key.clone(), value.clone());
            }
            other => return Err(format!("`rpk cluster config set {}`: expected a key and a value", other.join(" "))),
        }
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_keep_partitions_replicas_and_configs_and_dry_runs_create_nothing() {
        let script = "exists a || rpk topic create a --partitions 8 -r 3 --topic-config retention.ms=1\n\
                      rpk topic create b c -p=1 --replicas=1; rpk topic create d --dry";
        let topics = created_topics(script).unwrap();
        assert_eq!(topics.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!((topics["a"].partitions, topics["a"].replicas), (Some(8), Some(3)));
        assert_eq!(topics["a"].configs["retention.ms"], "1");
        assert_eq!((topics["c"].partitions, topics["c"].replicas), (Some(1), Some(1)));
        assert!(created_topics("rpk topic create a --replicas three").is_err());
        assert!(created_topics("rpk topic create a --bogus 1").is_err());
    }

    #[test]
    fn cluster_config_is_each_key_and_value_set() {
        let script = "set -e\nrpk cluster config set a false\nrpk cluster config set b 3 && rpk topic list";
        let set = cluster_config(script).unwrap();
        assert_eq!(set.into_iter().collect::<Vec<_>>(), [("a".into(), "false".into()), ("b".into(), "3".into())]);
        assert!(cluster_config("rpk cluster config set a").is_err());
        assert!(cluster_config("rpk cluster config set a 1 --no-confirm").is_err());
    }
}
