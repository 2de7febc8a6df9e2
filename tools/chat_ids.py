#!/usr/bin/env python3
"""Chat data → token ids, by the model's own tokenizer in Python, for `ulysses-pack pack` (its JSONL input: one
document per line, ids under "input_ids"). The exact path for every tokenizer: a SentencePiece tokenizer.model or a
Tekken file reads special-token text such as "<s>" or "[INST]" in a document as plain text, so rendering a template
to text and tokenizing that here would give other ids.

Each input line holds a conversation, a list of {"role", "content"} under --messages-key (default "messages"):
  transformers (default): AutoTokenizer.from_pretrained(MODEL).apply_chat_template(messages, tokenize=True) — the
      model folder's chat template (tokenizer_config.json or chat_template.jinja), its special tokens as ids;
  --mistral-common: mistral_common's MistralTokenizer.from_file(MODEL, finetuning)
      .encode_chat_completion(…).tokens — MODEL a tekken.json or tokenizer.model.v3 file, Mistral's own request
      format (its control tokens as ids).
The transformers path is as right as the folder's tokenizer config: a SentencePiece folder must list the template's
markers ([INST], …) as added or special tokens, as Mistral's Hugging Face repos do, or they too become plain text.
The whole conversation is one document: the ids are trained on as they are (no per-token loss mask).

usage: tools/chat_ids.py MODEL [--mistral-common] [--messages-key KEY] < chats.jsonl > ids.jsonl
       ulysses-pack pack ids.jsonl -o packed/ --seq-len 131072 --sp 8
exit 2, one line naming the input line, when a line is not a conversation.
"""
import argparse
import json
import sys


def encoder(a):
    """A function from one conversation (a list of messages) to its ids."""
    if a.mistral_common:
        from mistral_common.protocol.instruct.request import ChatCompletionRequest
        from mistral_common.protocol.instruct.validator import ValidationMode
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
        tok = MistralTokenizer.from_file(a.model, mode=ValidationMode.finetuning)   # may end with the answer
        return lambda messages: tok.encode_chat_completion(ChatCompletionRequest(messages=messages)).tokens
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(a.model)
    return lambda messages: list(tok.apply_chat_template(messages, tokenize=True))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a Hugging Face model folder (or, with --mistral-common, a tekken.json / "
                                 "tokenizer.model.v3 file)")
    p.add_argument("--mistral-common", action="store_true", help="encode with mistral_common's MistralTokenizer")
    p.add_argument("--messages-key", default="messages", help="the key of each line's conversation")
    a = p.parse_args()
    encode = encoder(a)
    for number, line in enumerate(sys.stdin, 1):
        if not line.strip():
            continue
        try:
            messages = json.loads(line)[a.messages_key]
            if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
                raise TypeError("not a list of messages")
        except (ValueError, KeyError, TypeError) as e:
            print(f"error: stdin line {number}: no conversation (a list of {{role, content}}) under "
                  f'"{a.messages_key}" ({type(e).__name__}: {e}) — HINT: --messages-key names the key',
                  file=sys.stderr)
            sys.exit(2)
        print(json.dumps({"input_ids": [int(i) for i in encode(messages)]}))


if __name__ == "__main__":
    main()
