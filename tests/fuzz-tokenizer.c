/* SPDX-License-Identifier: MIT */
/* Fuzzes the tokenizer and the streaming detokenizer with the vocabularies of the real model
 * files ($ASYNCLLM_MODEL, byte-level BPE; $ASYNCLLM_GEMMA_MODEL, SentencePiece, when it is
 * there). The first byte picks the vocabulary (bit 0), whether special tokens are parsed
 * (bit 1) and skipped in decoding (bit 2); the rest is text. Any text must encode to valid
 * ids; under BPE, valid UTF-8 without special-token parsing must decode back to itself,
 * less the bytes the vocabulary has no token for (lost, as llama.cpp loses them); the
 * detokenizer, fed the ids one by one, must give exactly the decoded text, for the encoded
 * ids and for ids read straight from the input's bytes. Built with libFuzzer, or with
 * fuzz-main.c to replay the committed corpus (tests/fuzz/tokenizer) as a regression test; a
 * missing model file makes the replay a skip. */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detokenizer.h"
#include "gguf.h"
#include "tokenizer.h"
#include "unicode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok) {
        if (!ok)
                abort();
}

static struct tokenizer *load(const char *variable, bool required) {
        const char *path = getenv(variable);
        struct gguf_file *f = NULL;
        struct tokenizer *tk = NULL;
        struct error err = {};
        if (!path || gguf_open(path, &f, &err) < 0 || tokenizer_load(f, &tk, &err) < 0) {
                if (required) {
                        fprintf(stderr, "SKIP: fuzz-tokenizer needs $%s, a model file to take the vocabulary from%s%s\n",
                                variable, err.message[0] ? ": " : "", err.message);
                        exit(77);
                }
                tk = NULL;
        }
        gguf_close(f);
        return tk;
}

/* Whether the ASCII byte c survives encoding between two letters: a byte-level vocabulary
 * without a token for it loses it (SmolLM2's has none for 0x04, 0x06, 0x13, 0x14, 0x16 and
 * 0x1d), as llama.cpp's tokenizer does too. */
static bool ascii_kept(const struct tokenizer *tk, uint8_t c) {
        char text[3] = { 'a', (char) c, 'b' };
        int32_t *ids = NULL;
        size_t n = 0, len = 0;
        char *back = NULL;
        struct error err = {};
        check(tokenizer_encode(tk, text, 3, false, &ids, &n, &err) == 0);
        check(tokenizer_decode(tk, ids, n, false, &back, &len, &err) == 0);
        bool kept = len == 3 && memcmp(back, text, 3) == 0;
        free(ids);
        free(back);
        return kept;
}

/* Whether a is b with some bytes left out. */
static bool subsequence(const char *a, size_t a_len, const char *b, size_t b_len) {
        size_t i = 0;
        for (size_t j = 0; j < b_len && i < a_len; j++)
                if (a[i] == b[j])
                        i++;
        return i == a_len;
}

static bool valid_utf8(const uint8_t *s, size_t len) {
        for (size_t at = 0; at < len;) {
                uint32_t cp;
                size_t n;
                if (utf8_next(s + at, len - at, &cp, &n) != UTF8_VALID)
                        return false;
                at += n;
        }
        return true;
}

/* The detokenizer's pieces, concatenated, equal tokenizer_decode_text() of the same ids. */
static void check_streaming(const struct tokenizer *tk, const int32_t *ids, size_t n, bool skip_special) {
        struct error err = {};
        char *whole = NULL;
        size_t whole_len = 0;
        check(tokenizer_decode_text(tk, ids, n, skip_special, &whole, &whole_len, &err) == 0);

        struct detokenizer *d = NULL;
        check(detokenizer_new(tk, skip_special, &d, &err) == 0);
        size_t at = 0;
        for (size_t i = 0; i <= n; i++) {
                const char *piece;
                size_t len;
                check((i < n ? detokenizer_push(d, ids[i], &piece, &len, &err) : detokenizer_finish(d, &piece, &len, &err)) ==
                      0);
                check(at + len <= whole_len && memcmp(whole + at, piece, len) == 0);
                at += len;
        }
        check(at == whole_len);
        detokenizer_free(d);
        free(whole);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static struct tokenizer *bpe, *spm;
        static bool loaded, kept[128];
        if (!loaded) {
                bpe = load("ASYNCLLM_MODEL", true);
                spm = load("ASYNCLLM_GEMMA_MODEL", false);
                for (int c = 0; c < 128; c++)
                        kept[c] = ascii_kept(bpe, (uint8_t) c);
                loaded = true;
        }
        if (size == 0)
                return 0;
        uint8_t flags = data[0];
        const struct tokenizer *tk = (flags & 1) && spm ? spm : bpe;
        bool parse_special = flags & 2, skip_special = flags & 4;
        const char *text = (const char *) data + 1;
        size_t len = size - 1;

        struct error err = {};
        int32_t *ids = NULL;
        size_t n = 0;
        check(tokenizer_encode(tk, text, len, parse_special, &ids, &n, &err) == 0);
        for (size_t i = 0; i < n; i++)
                check(tokenizer_valid_id(tk, ids[i]));
        if (tk == bpe && !parse_special && valid_utf8((const uint8_t *) text, len)) {
                char *back = NULL;
                size_t back_len = 0;
                bool every_byte_kept = true;
                for (size_t i = 0; i < len; i++)
                        every_byte_kept = every_byte_kept && (uint8_t) text[i] < 128 && kept[(uint8_t) text[i]];
                check(tokenizer_decode(tk, ids, n, false, &back, &back_len, &err) == 0);
                /* nothing invented or moved; nothing lost where each byte has its token */
                check(subsequence(back, back_len, text, len));
                check(!every_byte_kept || (back_len == len && memcmp(back, text, len) == 0));
                free(back);
        }
        check_streaming(tk, ids, n, skip_special);
        free(ids);

        /* the input's bytes, two at a time, as ids: byte tokens, pieces of characters, specials */
        size_t n_raw = len / 2;
        int32_t *raw = malloc((n_raw ? n_raw : 1) * sizeof(*raw));
        check(raw != NULL);
        for (size_t i = 0; i < n_raw; i++)
                raw[i] = (int32_t) (((uint32_t) data[1 + 2 * i] << 8 | data[2 + 2 * i]) %
                                    (uint32_t) tokenizer_vocab_size(tk));
        check_streaming(tk, raw, n_raw, skip_special);
        free(raw);
        return 0;
}
