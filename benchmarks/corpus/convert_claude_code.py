#!/usr/bin/env python3
"""Held-out Claude Code sessions (logs/chat.json of the `claude-code-hooks` Stop hook) ->
$AGENT_BREAKER_CORPUS/claude-code-heldout.jsonl.gz.

A HELD-OUT set for judging checks of the agent's closing claims (done_claim) on sessions their author
never read. None of these repositories is in tests/traces/real-claude-code.SOURCES.md (the tuning set).

Source: public repositories that committed the transcript the Stop hook (`--chat`) copies to
`logs/chat.json`: a JSON array of the lines of ~/.claude/projects/<project>/<session>.jsonl. Every
committed version of the file over the repository history is pinned in BLOBS (versions of 4 MiB or
more are absent from the snapshots and not used). A later version usually contains the earlier ones:
each line (keyed by its `uuid`) is taken from the largest version that holds it, and emitted once.
Sessions are the `sessionId`s of the lines; a session's lines are ordered by the first commit of the
version they come from, then by their position in that file.

Licence: every repository with such a log and a LICENSE file turned out to be in the tuning set or
without a transcript, so these ten state the MIT licence in their README (and two also in
pyproject.toml) but carry no LICENSE file. The basis is recorded per repository (LICENCE below, and the
README blob in the .files.jsonl). The data is not committed; drop a repository here if that basis is not
enough.

Events (agent "claude-code"; depth 1 for sub-agent lines, `isSidechain`):
- a human prompt (user line whose content is a string or text blocks; not isMeta, not a slash-command
  echo / local command output / compact summary / sub-agent prompt) -> `user`, and it opens a new turn;
- assistant text block -> `assistant`; the LAST top-level assistant text of each turn -> `final`
  instead (what the Stop hook receives as last_assistant_message). A turn ends at the next human prompt
  or at the end of the session. "[Request interrupted by user...]" ends a turn without a final (the Stop
  hook does not run on an interrupt); API error messages (isApiErrorMessage) are never the final;
- tool_use -> `tool_call` (tool = name, args = input as recorded, e.g. Bash {"command": ...},
  call_id = id; thought = the thinking / text block of the same API message, cut to 1,000 characters);
- tool_result -> `tool_result` (call_id = tool_use_id, tool from the call, ok = not is_error and not
  toolUseResult.interrupted, result.output / error = the result text);
- tokens: usage of one API message (message.id) repeats on each streamed line; the line with the largest
  output_tokens is used, on the first event of that message: input_tokens = input + cache creation +
  cache read (also given apart as cache_read_input_tokens / cache_creation_input_tokens);
- ts = the line's timestamp (unix seconds).

Text cut: tool output and finals head + tail (980 characters, a marker, the end; 2,000 in all), other
texts 2,000 (head), arguments 4,000 (_common.cut). Common secret patterns are replaced by [REDACTED].
"""

import re
from collections import defaultdict
from datetime import datetime

import orjson
from _common import Writer, blob, cut, git, text_of

SOURCE = "claude-code-heldout"
AGENT = "claude-code"
HEAD = 980

#: repository -> (commit of the licence statement, README blob, licence basis)
REPOS = {
    "JoshuaOliphant/ClimateHome": ("289c339bedfc0873020dca0f15b6b3303f662eaa", "96ae1d570caf2350dffc4ab8e624513696a7f3f2"),
    "JoshuaOliphant/mochi_donut": ("866c249141441e1c1c6a6e5fb364988fbe02559a", "793787c505ef2353dfcd8d0d72e78eef31332e45"),
    "Sstobo/agent-tree-package": ("1de90df3a4e7f1cd3cf6d467f12320adf9a56b6c", "9a66e93232deb67f136c70e60f685d4066df6316"),
    "ThomasJMcGovern/Golfgod_v1": ("0b343971595f0b194a47a4a34aa6ee34ae1b9f9c", "a7c6088480f5652ee7437b2238fb2b54b45cb089"),
    "mushfoo/puka": ("37a590eab4c3297dd35f330aa9cc587018b06945", "0dd8f6f6067722fb74c07753259898af55d10f45"),
    "njdamstra/claude-code-config": (("d2a3d06cbd16264486e3da7851b49c45a362fa12", "f452f07e87637db6e8cb687443c369d2a9a8b1b5")),
    "odgsully/adhs-working": ("5dcd82ffaf2a17cd61195ed3a91e99c6cb767e8c", "e7eb923145931b9b3e5cbd57cc7322adb2403b39"),
    "pleelapr/a-sdlc": (("c3a1f8fc603fbc2ffa4eefeb03b6dc1c6fb335d9", "b24c6fe297cb892ecd5da8d2a19a76525bc38b67")),
    "stevengonsalvez/claudecode-bootstrap": (
        "889bd5361f668673ea94658c7296f39d8dca4cf8",
        "d0bd3d74b90463e0a0c9894405cc6cdec40d429d",
    ),
    "superdisco-agents/moai-flow": ("1b5d58491f31d72c27d13a29dc7762035cedddf7", "4a9ebc6dd856128260b9fe5e112a8eadc62857f4"),
}

LICENCE = {
    "JoshuaOliphant/ClimateHome": 'MIT, stated in README.md ("## License / MIT License - see LICENSE"; badge); no LICENSE file',
    "JoshuaOliphant/mochi_donut": 'MIT, stated in README.md ("## License / MIT"); no LICENSE file',
    "Sstobo/agent-tree-package": 'MIT, stated in README.md ("## License / MIT License - see LICENSE"; badge); no LICENSE file',
    "ThomasJMcGovern/Golfgod_v1": 'MIT, stated in README.md ("## License / MIT License - feel free to use ..."); no LICENSE file',
    "mushfoo/puka": 'MIT, stated in README.md ("licensed under the MIT License - see the LICENSE file"); no LICENSE file',
    "njdamstra/claude-code-config": 'MIT, stated in README.md ("## License / MIT License - feel free to use and modify"); '
    "no LICENSE file",
    "odgsully/adhs-working": 'MIT, stated in README.md ("## License / MIT"); no LICENSE file',
    "pleelapr/a-sdlc": 'MIT, stated in README.md ("MIT License - see LICENSE") and pyproject.toml (license = "MIT"); '
    "no LICENSE file",
    "stevengonsalvez/claudecode-bootstrap": (
        'MIT, stated in README.md ("## License / MIT License - see LICENSE"; badge); no LICENSE file'
    ),
    "superdisco-agents/moai-flow": 'MIT, stated in README.md ("## License / MIT License"; badge) and pyproject.toml; '
    "no LICENSE file",
}

#: (repository, first commit holding the version, path, blob): every committed version under 4 MiB
BLOBS = [
    (
        "JoshuaOliphant/ClimateHome",
        "d0fe66b39e20495f3b617df512e724257e7c8a1e",
        "logs/chat.json",
        "0427bf015d1f4826dbf59a5057de6c6d71ab29e7",
    ),  # 1476722 bytes
    (
        "JoshuaOliphant/mochi_donut",
        "2037833a752e4e15915eba6259965547aa97bd0f",
        "logs/chat.json",
        "8df4f9d022f6e8c0388e145ec8b376cd8790df42",
    ),  # 296534 bytes
    (
        "JoshuaOliphant/mochi_donut",
        "e1d07cd3dbf31dc0f581eaa1738dcb1fc95d45d0",
        "logs/chat.json",
        "124a4a037f237af5b019bff949129de6cf503da9",
    ),  # 829902 bytes
    (
        "Sstobo/agent-tree-package",
        "01681fb48793d9a8246b337f5b92168e978469e7",
        "logs/chat.json",
        "0b9c6d7e7af9eb655e652b633f06c59b16338903",
    ),  # 172605 bytes
    (
        "Sstobo/agent-tree-package",
        "35e1d70d3bc7d01a1913280445b2c1c7a3c7681d",
        "logs/chat.json",
        "5c6af34a2034746f9ff83647584a41eca8f2309d",
    ),  # 224775 bytes
    (
        "ThomasJMcGovern/Golfgod_v1",
        "cadff765325f6c9d0611895187e00e0c22bbd319",
        "logs/chat.json",
        "392f3b2d351a49fa1d51459966512795f67c0694",
    ),  # 2120674 bytes
    (
        "ThomasJMcGovern/Golfgod_v1",
        "bffc5862f613539685aff8ba54db67b4e8ef2ddb",
        "logs/chat.json",
        "b5205ffa6222dbb6b16f933e67996cabc73b661f",
    ),  # 1525119 bytes
    (
        "ThomasJMcGovern/Golfgod_v1",
        "c2f506b9010ba2c86c510d6c87e8d69867e33e1e",
        "logs/chat.json",
        "adc47af6bd4b0289beeeb2c8af68da1be05dfc3f",
    ),  # 2579035 bytes
    (
        "ThomasJMcGovern/Golfgod_v1",
        "0cde8ac5248d0129800f0f32996a173a954dc6cc",
        "logs/chat.json",
        "09567c45b2d692ab748232b2c5bd6f8c6af49a48",
    ),  # 978541 bytes
    (
        "ThomasJMcGovern/Golfgod_v1",
        "abaf044b26f73da3449d07634e66447e65e58083",
        "logs/chat.json",
        "a3b8aae4aa413318a5030de23547c8a2dcb0e446",
    ),  # 1475922 bytes
    (
        "ThomasJMcGovern/Golfgod_v1",
        "0b343971595f0b194a47a4a34aa6ee34ae1b9f9c",
        "logs/chat.json",
        "b6183dfe74b943fd1e048b211b5ca857645b29e4",
    ),  # 317470 bytes
    (
        "mushfoo/puka",
        "0e60b704abc82ba6da1b223259cd2d5a84b7f77e",
        "logs/chat.json",
        "35f24c7036bba84a56e62c71577a512ca70d92e0",
    ),  # 551194 bytes
    (
        "njdamstra/claude-code-config",
        "f20d5fdd139015f1db373591d330595762266fd5",
        "logs/chat.json",
        "c443cdd259bb78054adfc3736c2ff0cae7b2b401",
    ),  # 153215 bytes
    (
        "njdamstra/claude-code-config",
        "b334b7cf1a7535fefcf70bce909845d6f1ccd0b6",
        "logs/chat.json",
        "cb0b6797e37a303f6ba32fde20472b2f28b07db0",
    ),  # 953677 bytes
    (
        "njdamstra/claude-code-config",
        "2810126525233aaf44b7528f3e77b57068a4bef2",
        "logs/chat.json",
        "594c9d9016b154c430297a843974e8faaeaa294e",
    ),  # 358291 bytes
    (
        "njdamstra/claude-code-config",
        "b4beebd8c0a42ec26581d7ea881a947cdc30396b",
        "logs/chat.json",
        "c30a2138b696a811e47bf6254db526c86ff53950",
    ),  # 148226 bytes
    (
        "odgsully/adhs-working",
        "3550ca29d080d607035b73864363b07420b8c5ad",
        "logs/chat.json",
        "e49f273dfe221e3c5009c2a28e118e7f609b9c42",
    ),  # 380144 bytes
    (
        "odgsully/adhs-working",
        "9a216a506934ccc423d86b3dfae64dc86eb7cea8",
        "logs/chat.json",
        "f1a2e0f474d6cbc84313aa82999838bf986689da",
    ),  # 217495 bytes
    (
        "odgsully/adhs-working",
        "2f0a537c20e85979c05ea65d23e4a60853c19fdf",
        "logs/chat.json",
        "0e80d9d11d6e7fc340164b9bcb09a5390b4ea974",
    ),  # 3097954 bytes
    (
        "odgsully/adhs-working",
        "bd469ca33390ebbfb0700e2f0fb5780a7c31a93a",
        "logs/chat.json",
        "fb19b95a484ef3af209f90e21c8a8f4e766750aa",
    ),  # 357249 bytes
    (
        "odgsully/adhs-working",
        "4bae2d6e40e1bf86b4e7617c450342a786f04239",
        "logs/chat.json",
        "4fdf0b1e462b9208c31241c297b062c6809ce1e5",
    ),  # 2906921 bytes
    (
        "odgsully/adhs-working",
        "9ac8a2b2ad99c268f0e87fbe845a9ed0af2e8a2a",
        "logs/chat.json",
        "c4b9c886cde9bbc35a99bd8849060e51f7123a10",
    ),  # 300021 bytes
    (
        "odgsully/adhs-working",
        "307c330f5f713d58a61f263a7cbdbfafec80df99",
        "logs/chat.json",
        "f8f7fbecb050e6079fc121a2a1f67618dc47037a",
    ),  # 320948 bytes
    (
        "odgsully/adhs-working",
        "da7ea136c8a8ff99cff7688c7c726e2f85176584",
        "logs/chat.json",
        "817c8227f0523d95367d0f3ce39a140bac932aa6",
    ),  # 220446 bytes
    (
        "odgsully/adhs-working",
        "82b5a97f26344792d5bd90410685b6e48818d5c2",
        "logs/chat.json",
        "b6280c8e8f302f5156e00b9f017db21164cc962c",
    ),  # 1581016 bytes
    (
        "odgsully/adhs-working",
        "8da304ad0a7a1ef9dc8e45a91fc42fa123cad2c8",
        "logs/chat.json",
        "0eacdf316de1aeaf1bbba25eb299eb8d1ea46579",
    ),  # 29056 bytes
    (
        "odgsully/adhs-working",
        "dbf6397d4cb7c954575da4f55ce9936dc7b67457",
        "logs/chat.json",
        "ad215b121593dc5f707747cabf6ad7e09f71b215",
    ),  # 888889 bytes
    (
        "odgsully/adhs-working",
        "a636d07b5f10e8bef63ac32f9f44008c329af91d",
        "logs/chat.json",
        "14f7df65ec582fad2b890abe3b50c0b060984e32",
    ),  # 1023306 bytes
    (
        "odgsully/adhs-working",
        "1918f651bb74f815405f9923ed925b77d83775a6",
        "logs/chat.json",
        "1892bea49571f546f4937bf412e839af6833295c",
    ),  # 466186 bytes
    (
        "odgsully/adhs-working",
        "58ea9b262205e747956c00f6d08d9d54e8294980",
        "logs/chat.json",
        "0ff8b8896dbb37c2d7a91ba31aefcac7b6085a7f",
    ),  # 309018 bytes
    (
        "odgsully/adhs-working",
        "24318e31865917cd7a25eb6b315cebbccf91955e",
        "logs/chat.json",
        "1c6ada8d31e9c1bb11ae770482df402cc82a3e8c",
    ),  # 932323 bytes
    (
        "odgsully/adhs-working",
        "520430151847044dd68ecc3c650d1ad7922c181a",
        "logs/chat.json",
        "409ca1daefbdd1cd10553f03b40f329f40166a11",
    ),  # 1318895 bytes
    (
        "odgsully/adhs-working",
        "989b0d703a7220e3b653ac61eb93367d5cd16bac",
        "logs/chat.json",
        "34abd120de043209d99de8d50f0b5f0ba8e1e434",
    ),  # 1025359 bytes
    (
        "odgsully/adhs-working",
        "50cd117ca45cec88f788ca6fccf60f8131c2cdca",
        "logs/chat.json",
        "d640ebc1d7cea59d73d944c33df3ca8672eec5cc",
    ),  # 805789 bytes
    (
        "odgsully/adhs-working",
        "f02d4b0a690a6e02b930d2aac778060f49e8bbe8",
        "logs/chat.json",
        "e9d4dde5a3be157f63691d69015d243fd1aeae69",
    ),  # 164373 bytes
    (
        "odgsully/adhs-working",
        "d04fd7afc4729039f5671b0a2c06fcbec9aa1602",
        "logs/chat.json",
        "7c6415683078a7b4de2838413103f8bec6007144",
    ),  # 507471 bytes
    (
        "odgsully/adhs-working",
        "9d9073767705157902ec08d62ce981278948bed1",
        "logs/chat.json",
        "5190ed233d1a6d4491a73aad11e278eaaa1a8ccd",
    ),  # 515178 bytes
    (
        "odgsully/adhs-working",
        "d1d0e06352f7ccf1a44e1d7aefc0b78033b36be2",
        "logs/chat.json",
        "491b1dfce35140b81d175101c6d33937e86a61cc",
    ),  # 542358 bytes
    (
        "odgsully/adhs-working",
        "90173f539d6b373a7ee50acd47f97e2e3d0c6f20",
        "logs/chat.json",
        "62975c1ba3746dc2ddabd8e33242c0e0be261cdf",
    ),  # 169274 bytes
    (
        "odgsully/adhs-working",
        "a9d6e560d897a006998c586e8a2e0ca8e58e8ce3",
        "logs/chat.json",
        "cb7b4ecb697797e2a2a045eefd3690467f465bba",
    ),  # 610234 bytes
    (
        "odgsully/adhs-working",
        "b12a2648b91d5bccf1b03bef35d4a843d66c492f",
        "logs/chat.json",
        "25e90aeb840c8f99d887d53d519277e5295fef2b",
    ),  # 171218 bytes
    (
        "pleelapr/a-sdlc",
        "41db236f7747377a0b37967b510f6f90f5ae9ee6",
        "logs/chat.json",
        "542d07548c3115e9a70aad223a43123e67041b9c",
    ),  # 347181 bytes
    (
        "stevengonsalvez/claudecode-bootstrap",
        "2ccdee75147a0d3ffeae76d545258173f604b357",
        "logs/chat.json",
        "f3975337c43fb26359e9f22173565f6ee5f93ffb",
    ),  # 1204281 bytes
    (
        "stevengonsalvez/claudecode-bootstrap",
        "91927c87868e724c49a8b4cb304276b6a78fd057",
        "logs/chat.json",
        "2338d28cfb65efdc20acda0c6cbf793fbba2d9cb",
    ),  # 166324 bytes
    (
        "superdisco-agents/moai-flow",
        "505bf6a22bf826b09efefb1da7ac04394ec349de",
        "logs/chat.json",
        "8791285739f84e80b899f5cc5a6fae81acb3da20",
    ),  # 1095233 bytes
]

SECRET = re.compile(
    r"(sk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|AKIA[0-9A-Z]{16}"
    r"|xox[abprs]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35}|eyJ[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{10,})"
)
INTERRUPT = "[Request interrupted by user"
NOT_PROMPT = ("<command-name>", "<command-message>", "<local-command-stdout>", "<local-command-stderr>", "Caveat: ")


def red(s):
    return SECRET.sub("[REDACTED]", s) if isinstance(s, str) else s


def red_obj(x):
    if isinstance(x, str):
        return red(x)
    if isinstance(x, dict):
        return {k: red_obj(v) for k, v in x.items()}
    if isinstance(x, list):
        return [red_obj(v) for v in x]
    return x


def ts_of(e):
    t = e.get("timestamp")
    if not isinstance(t, str):
        return None
    try:
        return datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def load(repo, sha):
    raw = blob(repo, sha)
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = [orjson.loads(x) for x in raw.splitlines() if x.strip()]
    return [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []


def line_key(e):
    return e.get("uuid") or orjson.dumps(e, option=orjson.OPT_SORT_KEYS)


def sessions_of(repo, rows):
    """{sessionId: [line]}: each line from the largest version holding it, ordered by version then position."""
    order = {c: int(t) for c, t in (x.split() for x in git(repo, "log", "--all", "--format=%H %ct").decode().split("\n") if x)}
    versions = []
    for _repo, commit, path, sha in rows:
        lines = load(repo, sha)
        versions.append((commit, path, sha, lines))
    by_size = sorted(versions, key=lambda v: (-len(v[3]), order.get(v[0], 0), v[2]))
    owner = {}
    for _commit, _path, sha, lines in by_size:
        for e in lines:
            owner.setdefault(line_key(e), sha)
    sess = defaultdict(list)
    used = defaultdict(set)
    for _commit, _path, sha, lines in sorted(versions, key=lambda v: (order.get(v[0], 0), v[2])):
        for e in lines:
            k = line_key(e)
            if owner.get(k) != sha or e.get("type") not in ("user", "assistant"):
                continue
            owner[k] = None  # emit once even if repeated inside one version
            sid = e.get("sessionId") or "nosession"
            sess[sid].append(e)
            used[sid].add(sha)
    return sess, used, versions


def usage_by_message(lines):
    best = {}
    for e in lines:
        m = e.get("message") or {}
        mid, u = m.get("id"), m.get("usage")
        if e.get("type") != "assistant" or not mid or not isinstance(u, dict):
            continue
        if mid not in best or (u.get("output_tokens") or 0) > (best[mid].get("output_tokens") or 0):
            best[mid] = u
    out = {}
    for mid, u in best.items():
        cr, cc = u.get("cache_read_input_tokens") or 0, u.get("cache_creation_input_tokens") or 0
        out[mid] = {
            "input_tokens": (u.get("input_tokens") or 0) + cr + cc,
            "output_tokens": u.get("output_tokens"),
            "cache_read_input_tokens": cr,
            "cache_creation_input_tokens": cc,
        }
    return out


def convert_session(w, sid, lines, info):
    s = w.session(sid)
    usage = usage_by_message(lines)
    tok_done = set()
    thought_of = {}  # message id -> last thinking / text of that message
    pend = {}  # tool_use id -> name
    turn = {"last": None}  # the last top-level assistant text event of the open turn
    stats = {"finals": 0, "turns": 0, "interrupts": 0, "api_errors": 0}

    def close_turn():
        ev = turn["last"]
        if ev is not None:
            ev["type"] = "final"
            ev["text"] = cut(ev.pop("_full"), head=HEAD)
            stats["finals"] += 1
        turn["last"] = None

    def tok(mid):
        if mid and mid not in tok_done and mid in usage:
            tok_done.add(mid)
            return usage[mid]
        return {}

    for e in lines:
        typ = e.get("type")
        m = e.get("message") or {}
        content = m.get("content")
        side = bool(e.get("isSidechain"))
        kw = {"ts": ts_of(e), "agent": AGENT, "depth": 1 if side else 0}
        if typ == "user":
            blocks = content if isinstance(content, list) else None
            results = [b for b in blocks or [] if isinstance(b, dict) and b.get("type") == "tool_result"]
            tur = e.get("toolUseResult")
            for b in results:
                cid = b.get("tool_use_id")
                out = red(text_of(b.get("content"), skip_empty=True))
                interrupted = isinstance(tur, dict) and bool(tur.get("interrupted"))
                ok = not b.get("is_error") and not interrupted
                o = cut(out, head=HEAD)
                s.result(pend.pop(cid, "tool"), cid, ok, output=o, error=None if ok else o, **kw)
            if results:
                continue
            text = text_of(content, skip_empty=True)
            if side or e.get("isMeta") or e.get("isCompactSummary") or e.get("isVisibleInTranscriptOnly"):
                continue
            t = text.strip()
            if not t:
                continue
            if t.startswith(INTERRUPT):
                turn["last"] = None  # an interrupted turn: the Stop hook does not run
                stats["interrupts"] += 1
                continue
            if t.startswith(NOT_PROMPT):
                continue
            close_turn()
            stats["turns"] += 1
            s.user(red(text), **kw)
            continue
        if typ != "assistant" or not isinstance(content, list):
            continue
        mid = m.get("id")
        api_err = bool(e.get("isApiErrorMessage"))
        for b in content:
            if not isinstance(b, dict):
                continue
            bt = b.get("type")
            if bt == "thinking" and b.get("thinking"):
                thought_of[mid] = b["thinking"]
            elif bt == "text" and b.get("text"):
                thought_of[mid] = b["text"]
                txt = red(b["text"])
                ev = s.assistant(txt, **kw, **tok(mid))
                if api_err:
                    stats["api_errors"] += 1
                elif not side:
                    if turn["last"] is not None:
                        turn["last"].pop("_full", None)
                    ev["_full"] = txt
                    turn["last"] = ev
            elif bt == "tool_use":
                name = b.get("name") or "tool"
                th = thought_of.get(mid)
                ev = s.call(
                    name,
                    red_obj(b.get("input") if isinstance(b.get("input"), dict) else {"raw": b.get("input")}),
                    call_id=b.get("id"),
                    thought=th[:1000] if th else None,
                    **kw,
                    **tok(mid),
                )
                pend[ev["call_id"]] = name
    close_turn()
    for ev in w.lines[s.start :]:
        ev.pop("_full", None)
    s.done(None, **info, **stats)
    return s


def main():
    w = Writer(SOURCE)
    by_repo = defaultdict(list)
    for row in BLOBS:
        by_repo[row[0]].append(row)
    for repo in sorted(REPOS, key=str.lower):
        head, readme = REPOS[repo]
        w.used(repo, head, "README.md", readme, note=f"licence: {LICENCE[repo]}")
        sess, used, versions = sessions_of(repo, by_repo[repo])
        for commit, path, sha, lines in versions:
            w.used(repo, commit, path, sha, note=f"{len(lines)} lines")
        for sid in sorted(sess, key=lambda k: (min(ts_of(e) or 0 for e in sess[k]), k)):
            lines = sess[sid]
            if not any(e.get("type") == "assistant" for e in lines):
                continue
            name = f"{SOURCE}/{repo}/{sid[:8]}"
            convert_session(
                w,
                name,
                lines,
                {
                    "repo": repo,
                    "session_id": sid,
                    "blobs": sorted(used[sid]),
                    "licence": LICENCE[repo],
                    "agent": AGENT,
                },
            )
    w.close()


if __name__ == "__main__":
    main()
