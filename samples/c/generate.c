/* tilefire_c_generate: text generation through Tilefire's C API alone (tilefire/tilefire.h, libtilefire.so).
 *
 *   tilefire_c_generate [--model DIR] [--prompt TEXT] [--max-new-tokens N] [--threads N]
 *
 * Without --model it runs the built-in sample. With a tokenizer.json in the folder, the prompt is encoded
 * with it and the reply is streamed as text; without one, the prompt's bytes are its tokens and the reply
 * prints as token ids. Exits 2 for bad input, 3 for a fault of the device or a peer, 1 otherwise. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tilefire/tilefire.h"

static int exit_status(tilefire_status status) {
  switch (status) {
    case TILEFIRE_OK: return 0;
    case TILEFIRE_ERROR_INPUT: return 2;
    case TILEFIRE_ERROR_DEVICE:
    case TILEFIRE_ERROR_TRANSPORT: return 3;
    default: return 1;
  }
}

static int fail_with(tilefire_status status, const char* message) {
  fprintf(stderr, "tilefire_c_generate: %s: %s\n", tilefire_status_name(status), message);
  return exit_status(status);
}

static int fail(tilefire_status status) { return fail_with(status, tilefire_last_error()); }

/* What on_token needs: the stream that turns tokens into text (NULL: print ids), and the first failure with
 * its message (tilefire_generate, which returns after it, clears tilefire_last_error). */
typedef struct printer {
  tilefire_text_stream* stream;
  tilefire_status status;
  char message[512];
} printer;

static int print_token(void* user_data, int32_t token) {
  printer* p = (printer*)user_data;
  if (!p->stream) {
    printf(" %d", (int)token);
  } else {
    char* text = NULL;
    size_t length = 0;
    p->status = tilefire_text_stream_add(p->stream, token, &text, &length);
    if (p->status != TILEFIRE_OK) { /* stop generating: the failure is reported after */
      snprintf(p->message, sizeof p->message, "%s", tilefire_last_error());
      return 1;
    }
    fwrite(text, 1, length, stdout);
    tilefire_free(text);
  }
  fflush(stdout);
  return 0;
}

static int parse_count(const char* flag, const char* value, uint32_t* out) {
  char* end = NULL;
  errno = 0;
  unsigned long parsed = value ? strtoul(value, &end, 10) : 0;
  if (!value || *value < '0' || *value > '9' || *end != '\0' || errno || parsed > 1000000UL) {
    fprintf(stderr, "tilefire_c_generate: %s expects a count from 0 to 1000000, got '%s'\n", flag, value ? value : "");
    return 0;
  }
  *out = (uint32_t)parsed;
  return 1;
}

int main(int argc, char** argv) {
  const char* model_dir = NULL;
  const char* prompt_text = "Once upon a time";
  uint32_t max_new_tokens = 32, threads = 0;
  for (int i = 1; i < argc; ++i) {
    const char* value = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--model") == 0 && value) {
      model_dir = value;
    } else if (strcmp(argv[i], "--prompt") == 0 && value) {
      prompt_text = value;
    } else if (strcmp(argv[i], "--max-new-tokens") == 0) {
      if (!parse_count(argv[i], value, &max_new_tokens)) return 2;
    } else if (strcmp(argv[i], "--threads") == 0) {
      if (!parse_count(argv[i], value, &threads)) return 2;
    } else {
      fprintf(stderr, "usage: tilefire_c_generate [--model DIR] [--prompt TEXT] [--max-new-tokens N] [--threads N]\n"
                      "tilefire_c_generate: unknown flag or missing value: '%s'\n", argv[i]);
      return 2;
    }
    ++i;
  }

  tilefire_engine_options options;
  tilefire_engine_options_init(&options);
  options.model_dir = model_dir;
  options.threads = threads;
  tilefire_engine* engine = NULL;
  tilefire_status status = tilefire_engine_create(&options, &engine);
  if (status != TILEFIRE_OK) return fail(status);

  tilefire_tokenizer* tokenizer = NULL;
  if (model_dir && (status = tilefire_tokenizer_of_model_folder(model_dir, &tokenizer)) != TILEFIRE_OK) {
    tilefire_engine_free(engine);
    return fail(status);
  }
  int32_t* prompt = NULL;
  size_t prompt_count = strlen(prompt_text);
  if (tokenizer) {
    status = tilefire_tokenizer_encode(tokenizer, prompt_text, prompt_count, 1, &prompt, &prompt_count);
  } else {  /* a model without a tokenizer (the sample): the prompt's bytes are its tokens */
    prompt = (int32_t*)malloc((prompt_count ? prompt_count : 1) * sizeof(int32_t));
    if (!prompt) {
      fprintf(stderr, "tilefire_c_generate: out of memory\n");
      tilefire_engine_free(engine);
      return 1;
    }
    for (size_t i = 0; i < prompt_count; ++i) prompt[i] = (unsigned char)prompt_text[i];
  }
  printer out = {NULL, TILEFIRE_OK, ""};
  if (status == TILEFIRE_OK && tokenizer) status = tilefire_text_stream_create(tokenizer, prompt, prompt_count, &out.stream);

  tilefire_generate_result result;
  memset(&result, 0, sizeof result);
  result.struct_size = sizeof result;
  if (status == TILEFIRE_OK) {
    tilefire_generate_request request;
    tilefire_generate_request_init(&request);
    request.prompt = prompt;
    request.prompt_count = prompt_count;
    request.max_new_tokens = max_new_tokens;
    request.on_token = print_token;
    request.user_data = &out;
    printf("%s", prompt_text);
    status = tilefire_generate(engine, &request, &result);
    if (status == TILEFIRE_OK && out.status != TILEFIRE_OK) {
      printf("\n");
      tilefire_generate_result_free(&result);
      tilefire_text_stream_free(out.stream);
      tilefire_free(prompt);
      tilefire_tokenizer_free(tokenizer);
      tilefire_engine_free(engine);
      return fail_with(out.status, out.message);
    }
  }
  if (status == TILEFIRE_OK && out.stream) {
    char* rest = NULL;
    size_t length = 0;
    status = tilefire_text_stream_finish(out.stream, &rest, &length);
    if (status == TILEFIRE_OK) fwrite(rest, 1, length, stdout);
    tilefire_free(rest);
  }
  int exit_code = 0;
  if (status == TILEFIRE_OK) {
    printf("\n%zu tokens (%s): time to first token %.2f ms, %.1f tokens/s\n", result.token_count, result.finish_reason,
           result.ttft_ms, result.decode_tok_s);
  } else {
    printf("\n");
    exit_code = fail(status);
  }
  tilefire_generate_result_free(&result);
  tilefire_text_stream_free(out.stream);
  if (tokenizer) tilefire_free(prompt);
  else free(prompt);
  tilefire_tokenizer_free(tokenizer);
  tilefire_engine_free(engine);
  return exit_code;
}
