/* chat_context.c - the model's variables of a chat template's context (chat_context.h). */
#include "chat_context.h"

int chat_context_defaults(yyjson_mut_doc *d, yyjson_mut_val *o, const strata_model *m, int add_generation_prompt) {
    const strata_token ids[2] = {strata_token_bos(m), strata_token_eos(m)};
    const char *keys[2] = {"bos_token", "eos_token"};
    for (int k = 0; k < 2; k++) {
        const char *t = ids[k] >= 0 ? strata_token_text(m, ids[k]) : NULL;
        if (!yyjson_mut_obj_get(o, keys[k]) && !yyjson_mut_obj_add_strcpy(d, o, keys[k], t ? t : ""))
            return -1;
    }
    if (add_generation_prompt >= 0 && !yyjson_mut_obj_get(o, "add_generation_prompt") &&
        !yyjson_mut_obj_add_bool(d, o, "add_generation_prompt", add_generation_prompt != 0))
        return -1;
    return 0;
}
