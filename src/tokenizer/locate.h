/* tokenizer/locate.h: finding the tokenizer file inside a model directory. */
#ifndef MESHLM_TOKENIZER_LOCATE_H
#define MESHLM_TOKENIZER_LOCATE_H

/* The malloc'd path of DIR's tokenizer file (tokenizer.model, then
 * original/tokenizer.model), or NULL when there is none (or on allocation failure). */
char *mlm_tokenizer_locate(const char *dir);

#endif
