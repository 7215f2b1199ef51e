//! The stages of a multi-stage Dockerfile, read well enough to tell what each build target
//! runs and as whom.
//!
//! Comments and blank lines are dropped and `\` continuation lines joined; heredocs, parser
//! directives and `ARG` substitution are not supported.

/// One `FROM` stage and the instructions after it.
pub struct Stage {
    /// The stage name (`FROM base AS name`), if any.
    pub name: Option<String>,
    /// The image or earlier stage it starts from (flags such as `--platform` skipped).
    pub base: String,
    /// (upper-case keyword, arguments), continuation lines joined.
    pub instructions: Vec<(String, String)>,
}

/// The stages of the Dockerfile `text`, in order. Instructions before the first `FROM`
/// (such as a global `ARG`) are dropped.
pub fn dockerfile_stages(text: &str) -> Vec<Stage> {
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                let (keyword, args) = current.split_once(char::is_whitespace).unwrap_or((&current, ""));
                instructions.push((keyword.to_ascii_uppercase(), args.trim().to_owned()));
                current.clear();
            }
        }
    }
    let mut stages: Vec<Stage> = Vec::new();
    for (keyword, args) in instructions {
        if keyword == "FROM" {
            let parts: Vec<&str> = args.split_whitespace().filter(|w| !w.starts_with("--")).collect();
            let name = match parts.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => Some((*name).to_owned()),
                _ => None,
            };
            stages.push(Stage {
                name,
                base: parts.first().map(|s| (*s).to_owned()).unwrap_or_default(),
                instructions: Vec::new(),
            });
        } else if let Some(stage) = stages.last_mut() {
            stage.instructions.push((keyword, args));
        }
    }
    stages
}

/// The stage called `name` (`FROM ... AS name`), if any.
pub fn stage<'a>(stages: &'a [Stage], name: &str) -> Option<&'a Stage> {
    stages.iter().find(|s| s.name.as_deref() == Some(name))
}

/// The arguments of the last `keyword` (upper case) instruction of stage `from`, else of the
/// stage it is based on, and so on up the chain of named stages; `None` when no stage in the
/// chain has one (or the chain loops).
pub fn inherited(stages: &[Stage], from: &Stage, keyword: &str) -> Option<String> {
    let mut current = Some(from);
    let mut hops = 0;
    while let Some(s) = current {
        if let Some((_, args)) = s.instructions.iter().rev().find(|(k, _)| k == keyword) {
            return Some(args.clone());
        }
        current = stage(stages, &s.base);
        hops += 1;
        if hops > stages.len() {
            break;
        }
    }
    None
}

/// The program an `ENTRYPOINT`'s arguments run: the first element of the exec (JSON array)
/// form, or the first word of the shell form, unquoted.
pub fn entrypoint_program(entrypoint: &str) -> &str {
    entrypoint.trim_start_matches('[').split([',', ' ', ']']).next().unwrap_or_default().trim_matches('"')
}

/// The leading numeric components of a dotted version: `"1.89.0"` → `[1, 89, 0]`, `"1.89"`
/// → `[1, 89]`, `"1.x"` → `[1]`, `"latest"` → `[]`.
pub fn version(text: &str) -> Vec<u32> {
    text.split('.').map_while(|p| p.parse().ok()).collect()
}
