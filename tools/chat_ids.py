#!/usr/bin/env python3
"""Fine-tuning records → token ids and a loss mask, by the model's own tokenizer and chat template in Python, for
`ulysses-pack pack --loss-mask-key loss_mask` (its JSONL input: one document per line, "input_ids" and
"loss_mask", 1 where the token is trained on). The records are the two kinds TRL's SFTTrainer takes:
  {"messages": [{"role", "content"}, ...]}   a conversation (the key: --messages-key);
  {"prompt": P, "completion": C}              P and C both lists of messages (conversational) or both strings.
What the loss covers (--loss-on answers, the default), as TRL computes it:
  a conversation: its assistant turns. When the template marks them with {% generation %} … {% endgeneration %},
      transformers' apply_chat_template(return_assistant_tokens_mask=True) says which tokens they are (TRL's
      assistant_only_loss=True); otherwise each assistant turn is the tokens that rendering the conversation up to
      that turn adds to rendering it up to the turn before with the generation prompt (the prefix rule; a template
      that renders earlier turns differently once later ones follow is refused, one line naming the record);
  prompt-completion: the tokens after the prompt (TRL's completion_only_loss): conversational, the prompt rendered
      with the generation prompt, then prompt + completion rendered whole; text, tokenizer(prompt) and
      tokenizer(prompt + completion), the tokenizer's EOS appended to a completion that lacks it.
--loss-on all: every token (loss_mask all ones), TRL's default for conversations.
Tokenizers:
  transformers (default): AutoTokenizer.from_pretrained(MODEL) — the model folder's chat template
      (tokenizer_config.json or chat_template.jinja), its special tokens as ids;
  --mistral-common: mistral_common's MistralTokenizer.from_file(MODEL).encode_chat_completion(…).tokens — MODEL a
      tekken.json or tokenizer.model.v3 file, Mistral's own request format (conversations only; answers by the
      prefix rule).
The ids are encoded here, not rendered to text for ulysses-pack's tokenizer: a SentencePiece tokenizer.model or a
Tekken file reads special-token text such as "<s>" or "[INST]" in a document as plain text. A SentencePiece folder
must list the template's markers ([INST], …) as added or special tokens, as Mistral's Hugging Face repos do.

usage: tools/chat_ids.py MODEL [--loss-on answers|all] [--mistral-common] [--messages-key KEY] < sft.jsonl -o ids.jsonl
       ulysses-pack pack ids.jsonl --loss-mask-key loss_mask --long-docs truncate -o packed/ --seq-len 131072 --sp 8
exit 2, one line naming the input line, when a line is not a record of either kind or its answers cannot be found;
then nothing is written: -o FILE appears (renamed from a temporary beside it) only once every record has passed, and
without -o the ids go to stdout only then. Run it with the toolkit's venv (tools/bootstrap.sh installs transformers
and mistral_common there): /opt/ulysses-deps/venv/bin/python tools/chat_ids.py ...
"""
import argparse
import json
import os
import sys
import tempfile


class BadRecord(Exception):
    """A record this tool cannot encode; the message says why and what to do."""


class HfEncoder:
    """transformers' tokenizer and chat template."""

    def __init__(self, model):
        from transformers import AutoTokenizer
        self.tok = AutoTokenizer.from_pretrained(model)
        template = self.tok.chat_template
        self.marked = isinstance(template, str) and "{% generation %}" in template.replace("{%-", "{%")

    def chat(self, messages, generation_prompt=False):
        return list(self.tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation_prompt))

    def assistant_mask(self, messages):
        """The template's own {% generation %} marks (TRL's assistant_only_loss), or None when it has none."""
        if not self.marked:
            return None
        out = self.tok.apply_chat_template(messages, tokenize=True, return_dict=True,
                                           return_assistant_tokens_mask=True)
        return list(out["input_ids"]), list(out["assistant_masks"])

    def text(self, s):
        return list(self.tok(text=s)["input_ids"])

    def eos(self):
        return self.tok.eos_token


class MistralEncoder:
    """mistral_common's request format: finetuning mode for a conversation ending with its answer, test mode for one
    ending with the question (the generation prompt)."""

    def __init__(self, model):
        from mistral_common.protocol.instruct.request import ChatCompletionRequest
        from mistral_common.protocol.instruct.validator import ValidationMode
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
        self.request = ChatCompletionRequest
        self.answered = MistralTokenizer.from_file(model, mode=ValidationMode.finetuning)
        self.asking = MistralTokenizer.from_file(model, mode=ValidationMode.test)

    def chat(self, messages, generation_prompt=False):
        tok = self.asking if generation_prompt else self.answered
        return tok.encode_chat_completion(self.request(messages=messages)).tokens

    def assistant_mask(self, messages):
        return None

    def text(self, s):
        raise BadRecord("text prompt-completion records need a transformers tokenizer (drop --mistral-common)")

    eos = text


def by_prefixes(enc, messages):
    """(ids, mask): each assistant turn is what rendering up to it adds to rendering up to the turn before with the
    generation prompt."""
    ids = enc.chat(messages)
    mask = [0] * len(ids)
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        asked, answered = enc.chat(messages[:i], generation_prompt=True), enc.chat(messages[:i + 1])
        if answered[:len(asked)] != asked or ids[:len(answered)] != answered:
            raise BadRecord(f"message {i} (assistant): the template renders the conversation up to it differently "
                            "once later turns follow, so its tokens cannot be told — HINT: a template with "
                            "{% generation %} marks, or --loss-on all")
        mask[len(asked):len(answered)] = [1] * (len(answered) - len(asked))
    return ids, mask


def conversation(enc, messages, loss_on):
    if loss_on == "all":
        return enc.chat(messages), None
    marked = enc.assistant_mask(messages)
    ids, mask = marked if marked is not None else by_prefixes(enc, messages)
    if 1 not in mask:
        raise BadRecord("no assistant tokens: nothing to train on — HINT: --loss-on all trains on every token")
    return ids, mask


def prompt_completion(enc, prompt, completion):
    if isinstance(prompt, list) and isinstance(completion, list):
        asked, ids = enc.chat(prompt, generation_prompt=True), enc.chat(prompt + completion)
    elif isinstance(prompt, str) and isinstance(completion, str):
        eos = enc.eos()
        if eos and not completion.endswith(eos):
            completion += eos
        asked, ids = enc.text(prompt), enc.text(prompt + completion)
    else:
        raise BadRecord('"prompt" and "completion" must both be lists of messages or both strings')
    if ids[:len(asked)] != asked:
        raise BadRecord("the prompt's tokens are not the start of prompt + completion's (a merge across the seam): "
                        "the completion cannot be told — HINT: start the completion with a space or newline")
    return ids, [0] * len(asked) + [1] * (len(ids) - len(asked))


def messages_of(value):
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        raise BadRecord("not a list of messages ({role, content})")
    return value


def encode(enc, record, messages_key, loss_on):
    """(ids, mask) of one record, the mask 1 on its answers (None for a conversation under --loss-on all)."""
    if not isinstance(record, dict):
        raise BadRecord("not a JSON object")
    if messages_key in record:
        return conversation(enc, messages_of(record[messages_key]), loss_on)
    if "prompt" in record and "completion" in record:
        prompt, completion = record["prompt"], record["completion"]
        if isinstance(prompt, list) or isinstance(completion, list):
            messages_of(prompt), messages_of(completion)
        return prompt_completion(enc, prompt, completion)
    raise BadRecord(f'neither "{messages_key}" nor "prompt" and "completion" — HINT: --messages-key names the '
                    "conversation's key")


def fail(number, why):
    print(f"error: stdin line {number}: {' '.join(why.split())}", file=sys.stderr)
    sys.exit(2)


def encoder(a):
    """The tokenizer the flags ask for; one line naming the venv when this Python lacks its package."""
    try:
        return MistralEncoder(a.model) if a.mistral_common else HfEncoder(a.model)
    except ImportError as e:
        venv = os.path.join(os.environ.get("ULYSSES_DEPS", "/opt/ulysses-deps"), "venv", "bin", "python")
        print(f"error: {sys.executable} cannot import {e.name} — HINT: run it with the toolkit's venv: {venv} "
              f"tools/chat_ids.py ... (tools/bootstrap.sh installs it)", file=sys.stderr)
        sys.exit(2)


def write_all(lines, output):
    """Every line, once all records passed: to stdout, or to `output` through a temporary file beside it."""
    if output is None:
        sys.stdout.writelines(lines)
        return
    folder = os.path.dirname(os.path.abspath(output))
    fd, tmp = tempfile.mkstemp(prefix=".chat_ids-", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.writelines(lines)
        os.replace(tmp, output)
    except BaseException:
        os.unlink(tmp)
        raise


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.split("\n")[1:]))
    p.add_argument("model", help="a Hugging Face model folder (or, with --mistral-common, a tekken.json / "
                                 "tokenizer.model.v3 file)")
    p.add_argument("--loss-on", choices=("answers", "all"), default="answers",
                   help="train on the assistant turns / the completion (default), or on every token")
    p.add_argument("--mistral-common", action="store_true", help="encode with mistral_common's MistralTokenizer")
    p.add_argument("--messages-key", default="messages", help="the key of each conversation (default: messages)")
    p.add_argument("-o", "--output", help="the JSONL to write (default: stdout), complete or not at all")
    a = p.parse_args()
    enc = encoder(a)
    lines = []
    for number, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        try:
            ids, mask = encode(enc, json.loads(line), a.messages_key, a.loss_on)
        except BadRecord as e:
            fail(number, str(e))
        except Exception as e:   # the template's or the tokenizer's own refusal of this record
            fail(number, f"{type(e).__name__}: {e}")
        lines.append(json.dumps({"input_ids": [int(i) for i in ids],
                                 "loss_mask": mask if a.loss_on == "answers" else [1] * len(ids)}) + "\n")
    write_all(lines, a.output)


if __name__ == "__main__":
    main()
