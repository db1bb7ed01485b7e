/* The part of c_api_test written in C: tilefire.h compiled as strict C11, and a generation driven from C
 * alone (options, request, the token callback, the result, the step API). c_api_test.cpp checks what it
 * returns against the C++ engine. */
#include <stdio.h>
#include <string.h>

#include "tilefire/tilefire.h"

typedef struct stopper {
  size_t seen;
  size_t stop_after;
} stopper;

static int count_and_stop(void* user_data, int32_t token) {
  stopper* s = (stopper*)user_data;
  (void)token;
  return ++s->seen >= s->stop_after;
}

/* Greedy generation on the built-in sample (2 threads) of up to max_new_tokens, stopped by the callback
 * after stop_after tokens; then one greedy decode step of the last token. Writes the tokens, the step's
 * token and the finish reason; returns 0, or -1 with the failure in `error`. */
int c_api_generate_from_c(const int32_t* prompt, size_t prompt_count, uint32_t max_new_tokens, size_t stop_after,
                          int32_t* tokens, size_t capacity, size_t* count, int32_t* next_token, char* finish_reason,
                          size_t finish_capacity, char* error, size_t error_capacity) {
  tilefire_engine_options options;
  tilefire_engine_options_init(&options);
  options.threads = 2;
  tilefire_engine* engine = NULL;
  tilefire_status status = tilefire_engine_create(&options, &engine);
  if (status != TILEFIRE_OK) {
    snprintf(error, error_capacity, "create: %s", tilefire_last_error());
    return -1;
  }
  tilefire_generate_request request;
  tilefire_generate_request_init(&request);
  stopper s = {0, stop_after};
  request.prompt = prompt;
  request.prompt_count = prompt_count;
  request.max_new_tokens = max_new_tokens;
  request.stop_at_eos = 0;
  request.on_token = count_and_stop;
  request.user_data = &s;
  tilefire_generate_result result;
  memset(&result, 0, sizeof result);
  result.struct_size = sizeof result;
  int outcome = 0;
  status = tilefire_generate(engine, &request, &result);
  if (status != TILEFIRE_OK) {
    snprintf(error, error_capacity, "generate: %s", tilefire_last_error());
    outcome = -1;
  } else if (result.token_count == 0 || result.token_count > capacity || s.seen != result.token_count) {
    snprintf(error, error_capacity, "%zu tokens generated, %zu seen by the callback, room for %zu", result.token_count,
             s.seen, capacity);
    outcome = -1;
  } else {
    memcpy(tokens, result.tokens, result.token_count * sizeof(int32_t));
    *count = result.token_count;
    snprintf(finish_reason, finish_capacity, "%s", result.finish_reason);
    /* generate leaves every token but the last in the cache: feed it as the next step would */
    status = tilefire_engine_decode_greedy(engine, result.tokens[result.token_count - 1], next_token);
    if (status != TILEFIRE_OK) {
      snprintf(error, error_capacity, "decode_greedy: %s", tilefire_last_error());
      outcome = -1;
    }
  }
  tilefire_generate_result_free(&result);
  tilefire_engine_free(engine);
  return outcome;
}

/* The sizes of the header's structs as C lays them out, for the C++ side to compare with its own. */
void c_api_struct_sizes_in_c(size_t sizes[7]) {
  sizes[0] = sizeof(tilefire_engine_options);
  sizes[1] = sizeof(tilefire_generate_request);
  sizes[2] = sizeof(tilefire_generate_result);
  sizes[3] = sizeof(tilefire_model_info);
  sizes[4] = sizeof(tilefire_token_probability);
  sizes[5] = sizeof(tilefire_chat_message);
  sizes[6] = sizeof(tilefire_backend);
}
