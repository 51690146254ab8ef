/* tools/server/images.h: the images of a chat request for a vision model (Llama 3.2 Vision):
 * checked against the server (a model that takes images, --max-images), the prompt with the
 * image token where each image_url part is, decoded and preprocessed into the job (which owns
 * them from then on), and run through the vision encoder on the request's HTTP thread before
 * it is submitted. Errors name the part: "messages[i].content[k]". */
#ifndef MESHLM_SERVER_IMAGES_H
#define MESHLM_SERVER_IMAGES_H

#include "job.h"
#include "request.h"
#include "server.h"

/* Whether SRV takes R's images (R->n_images >= 1): its model has vision and R has at most
 * --max-images of them. 0 with E filled (400, PARAM the first part that cannot be taken). */
int srv_images_check(const srv_server *srv, const srv_request *r, srv_error *e);

/* R's prompt in the Llama 3 chat format with an open assistant header, appended to OUT: each
 * content list part by part (each text encoded on its own, each image as the model's image
 * token, as Meta's ChatFormat does), a string content as one text. 0 with E filled. */
int srv_images_prompt(const srv_server *srv, const srv_request *r, mlm_tokens *out, srv_error *e);

/* Decodes and preprocesses R's images, in order, into J->images (owned by J from then on);
 * each part's bytes are freed as soon as it is read. 0 with E filled: 400 with the library's
 * message for bytes that are no image, a corrupt or truncated one, another format or one too
 * large (PARAM the part), 500 out of memory. */
int srv_images_open(srv_server *srv, srv_request *r, srv_job *j, srv_error *e);

/* Runs the vision encoder on each of J's images (one image at a time over the whole server,
 * with --threads threads), counting its seconds in the metrics. Returns 1; 0 with E filled
 * (500) when the encoder fails, or with *GONE set and E untouched when the client closed the
 * connection or the server stops while it waited. */
int srv_images_encode(srv_server *srv, const srv_request *r, srv_job *j, srv_error *e, int *gone);

#endif
