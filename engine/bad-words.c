/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bad-words.h"
#include "sampling-params.h"

void bad_word_sequences_done(struct bad_word_sequences *s) {
        free(s->token_ids);
        free(s->ends);
        *s = (struct bad_word_sequences) { 0 };
}

static size_t sequence_start(const struct bad_word_sequences *s, size_t i) {
        return i == 0 ? 0 : s->ends[i - 1];
}

static int append_sequence(struct bad_word_sequences *s, const int32_t *ids, size_t n) {
        size_t used = sequence_start(s, s->n);
        int32_t *token_ids = realloc(s->token_ids, (used + n) * sizeof(*token_ids));
        if (!token_ids)
                return -ENOMEM;
        s->token_ids = token_ids;
        uint32_t *ends = realloc(s->ends, (s->n + 1) * sizeof(*ends));
        if (!ends)
                return -ENOMEM;
        s->ends = ends;
        memcpy(s->token_ids + used, ids, n * sizeof(*ids));
        s->ends[s->n++] = (uint32_t) (used + n);
        return 0;
}

static bool seen_before(const char *const *words, size_t i) {
        for (size_t j = 0; j < i; j++)
                if (strcmp(words[j], words[i]) == 0)
                        return true;
        return false;
}

/* The two spellings of one word; the word is at most SAMPLING_MAX_BAD_WORD_BYTES (validated
 * with the params), so both fit the buffer. */
static int tokenize_word(const struct tokenizer *tk, const char *word, struct bad_word_sequences *s,
                         struct error *err) {
        char spaced[SAMPLING_MAX_BAD_WORD_BYTES + 2];
        int32_t *bare = NULL, *after_space = NULL;
        size_t n_bare, n_after_space;
        int r;

        word += strspn(word, " \t\n\v\f\r");
        size_t len = strlen(word);
        if (len + 1 >= sizeof(spaced))
                return error_set(err, EINVAL, "bad_words entry \"%.32s...\" is longer than %d bytes", word,
                                 SAMPLING_MAX_BAD_WORD_BYTES);
        spaced[0] = ' ';
        memcpy(spaced + 1, word, len);
        if ((r = tokenizer_encode(tk, word, len, true, &bare, &n_bare, err)) < 0 ||
            (r = tokenizer_encode(tk, spaced, len + 1, true, &after_space, &n_after_space, err)) < 0)
                goto out;
        if (n_bare == 0) {
                r = error_set(err, EINVAL, "bad_words entries must tokenize to at least one token (an entry is only "
                              "whitespace)");
                goto out;
        }
        if ((r = append_sequence(s, bare, n_bare)) < 0)
                goto out;
        /* after a space the word may merge differently; a sequence of another length is the
         * word split in another place, which vLLM leaves out too */
        if (n_after_space == n_bare && after_space[0] != bare[0])
                r = append_sequence(s, after_space, n_after_space);
        if (r < 0)
                goto out;
        if (s->n > SAMPLING_MAX_BAD_WORD_SEQUENCES)
                r = error_set(err, EINVAL, "bad_words gives too many token sequences after tokenization: more than %d",
                              SAMPLING_MAX_BAD_WORD_SEQUENCES);
out:
        if (r == -ENOMEM)
                error_set(err, ENOMEM, "out of memory");
        free(bare);
        free(after_space);
        return r;
}

int bad_words_tokenize(const struct tokenizer *tk, const char *const *words, size_t n_words,
                       struct bad_word_sequences *ret, struct error *err) {
        struct bad_word_sequences s = { 0 };

        for (size_t i = 0; i < n_words; i++) {
                if (seen_before(words, i))
                        continue;
                int r = tokenize_word(tk, words[i], &s, err);
                if (r < 0) {
                        bad_word_sequences_done(&s);
                        return r;
                }
        }
        *ret = s;
        return 0;
}
