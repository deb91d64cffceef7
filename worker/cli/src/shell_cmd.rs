//! `patch-candidate completions SHELL` and `patch-candidate man`: shell completion scripts
//! (clap_complete) and a roff man page (clap_mangen), both generated from the command definition
//! itself, so they never drift from the commands and flags that exist.

use clap::{Args, CommandFactory as _, ValueEnum};

use super::outcome::OUTPUT_CODE;
use super::{Cli, CliError, Outcome};

/// Shells `completions` writes a script for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Shell {
    Bash,
    Zsh,
    Fish,
    Powershell,
}

impl Shell {
    fn generator(self) -> clap_complete::Shell {
        match self {
            Self::Bash => clap_complete::Shell::Bash,
            Self::Zsh => clap_complete::Shell::Zsh,
            Self::Fish => clap_complete::Shell::Fish,
            Self::Powershell => clap_complete::Shell::PowerShell,
        }
    }
}

/// `completions` arguments.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to write a completion script for.
    #[arg(value_enum)]
    shell: Shell,
}

/// `man` arguments.
#[derive(Debug, Args)]
pub(crate) struct ManArgs {}

const NAME: &str = "patch-candidate";

fn completion_script(shell: Shell) -> Result<String, CliError> {
    let mut out = Vec::new();
    clap_complete::generate(shell.generator(), &mut Cli::command(), NAME, &mut out);
    String::from_utf8(out)
        .map_err(|_| CliError::environment(OUTPUT_CODE, "completion script is not UTF-8"))
}

fn man_page() -> Result<String, CliError> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut out)
        .map_err(|_| CliError::environment(OUTPUT_CODE, "man page rendering failed"))?;
    String::from_utf8(out).map_err(|_| CliError::environment(OUTPUT_CODE, "man page is not UTF-8"))
}

/// `completions`.
pub(crate) fn completions(args: &CompletionsArgs) -> Result<Outcome, CliError> {
    let script = completion_script(args.shell)?;
    let shell = args
        .shell
        .to_possible_value()
        .map(|v| v.get_name().to_owned());
    Ok(Outcome {
        json: serde_json::json!({"shell": shell, "script": script}),
        text: script,
    })
}

/// `man`.
pub(crate) fn man(_: &ManArgs) -> Result<Outcome, CliError> {
    let page = man_page()?;
    Ok(Outcome {
        json: serde_json::json!({"man": page}),
        text: page,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::process::{Command, Stdio};

    use super::*;

    #[test]
    fn every_shell_gets_a_script_naming_the_commands() {
        for shell in Shell::value_variants() {
            let script = completion_script(*shell).unwrap();
            assert!(script.contains(NAME), "{shell:?}");
            for command in ["verify", "export", "completions", "man"] {
                assert!(script.contains(command), "{shell:?} lacks {command}");
            }
        }
    }

    #[test]
    fn the_bash_script_parses_with_bash_n() {
        let script = completion_script(Shell::Bash).unwrap();
        assert!(script.len() > 1000, "{} bytes", script.len());
        let mut child = Command::new("bash")
            .arg("-n")
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("bash is required");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(script.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "bash -n: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // And a broken script fails it: the check is real.
        let mut child = Command::new("bash")
            .arg("-n")
            .stdin(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"_f() { if; }")
            .unwrap();
        assert!(!child.wait().unwrap().success());
    }

    #[test]
    fn the_man_page_lists_every_subcommand() {
        let page = man_page().unwrap();
        assert!(page.contains(".TH patch-candidate"), "no title");
        let (_, section) = page
            .split_once(".SH SUBCOMMANDS\n")
            .expect("no subcommand section");
        let section = section.split("\n.SH ").next().unwrap();
        let names: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|s| s.get_name().to_owned())
            .collect();
        for wanted in ["verify", "export", "completions", "man"] {
            assert!(names.iter().any(|n| n == wanted), "{names:?}");
        }
        for name in names {
            let entry = format!(".TP\npatch\\-candidate\\-{}(1)\n", name.replace('-', "\\-"));
            assert!(section.contains(&entry), "the man page lacks {name}");
        }
    }
}
