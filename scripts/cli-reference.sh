#!/usr/bin/env bash
# Writes the CLI reference from the programs' own --help:
#   scripts/cli-reference.sh [build/bin/gradcomp] > docs/cli.md
set -euo pipefail
cd "$(dirname "$0")/.."
g=${1:-build/bin/gradcomp}
# --help without trailing spaces and trailing blank lines.
tidy() { sed 's/[[:space:]]*$//' | awk 'NF { for (; n > 0; n--) print ""; print; next } { n++ }'; }
sec() { echo; echo "## \`gradcomp $1\`"; echo; [ -n "${2:-}" ] && { echo "$2"; echo; }; echo '```'; $g $1 --help | tidy; echo '```'; }
cat <<'HDR'
# CLI reference

`gradcomp` is one command with subcommands. `list`, `codec`, `bench codec` and `advise` run in the
`gradcomp` binary itself (no LibTorch; it starts in milliseconds); `train`, `eval`,
`bench codec --torch` and `bench scheme` run in `gradcomp-torch`, the binary beside it, which `gradcomp` execs with
the same arguments. Every error ends the program with one line `gradcomp: <message>` on stderr
and exit status 1. `train` checks all its flags, and the flags against each other, before it
starts a worker, so a bad value is that one line too; otherwise it exits with its workers' status.

The sections below are the programs' own `--help`.
HDR
echo; echo '## `gradcomp`'; echo; echo '```'; $g --help | tidy; echo '```'
sec list "Every codec with its wire id, traits, parameters (default, range or choices) and examples; the memory wrappers; the named memories (\`dgc\`); the reducer schemes. \`--json\`: one JSON object per line."
sec "codec encode" "One codec step on raw little-endian float32 files. For a spec with a memory (\`ef(...)\`, \`efm(...)\`, \`dgc\`), \`--residual FILE\` carries the state between calls: read if the file exists, written back."
sec "codec decode"
sec "bench codec" "Encode and decode time per spec against memcpy, on random data. \`--torch\` adds LibTorch's \`topk(abs(g), k)\` (runs in \`gradcomp-torch\`). The figures: [measurements/codec-speed.md](measurements/codec-speed.md)."
sec "bench scheme" "A reducer scheme's CPU time per step (encode, decode) on a model's buckets, run in a world of one: what \`advise\` costs the schemes with (runs in \`gradcomp-torch\`). See [cost-model.md](cost-model.md#codec-and-scheme-costs)."
sec advise "Predicts, per compressor, bytes per worker per step, encode / decode / communication time, step time and speedup over dense on a model, network and worker count, and ranks them; \`--sweep\`: where each method pays for W = 2..1024 and 100 Mbit/s..100 Gbit/s. Formulas, terms and findings: [cost-model.md](cost-model.md)."
sec train "See the [training guide](training.md). Defaults: 4 local workers, MLP 1536-1536 on Fashion-MNIST, \`ef(topk:ratio=0.01)\`, 3 epochs, lr 0.05 with 50 warm-up steps and cosine decay, seed 42."
sec eval "Evaluates every new checkpoint of a run's \`--checkpoint-dir\` on the test set, one JSON line each; give it the run's \`--model\`, \`--mlp-hidden\` and \`--dataset\`."
