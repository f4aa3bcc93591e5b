"""What every agent's hook and every transport of ours agree on: the agents, the exit code that
blocks, the largest input read. A leaf with no imports: the hook command's light client
(`_hook_client`) and the hooks package (`hooks`) both take these, so neither keeps a copy."""

CLAUDE_CODE, CODEX, GEMINI_CLI = "claude-code", "codex", "gemini-cli"
AGENTS = (CLAUDE_CODE, CODEX, GEMINI_CLI)
#: exit code that blocks the call in every agent (stderr is the reason the model reads)
BLOCK_EXIT = 2
#: the largest hook input the guard reads, on every transport (the command's stdin, the
#: endpoint's body, whatever the server's own request limit): above what a model writes in one
#: call (a few hundred KB at most) or an agent hands its model from one tool
MAX_INPUT_BYTES = 2**20
